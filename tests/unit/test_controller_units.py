"""The C++ controller's shape (docs/controller.md): a small shell (controller.{h,cpp}) that wires units, each
owning its fields and seeing nothing of the controller. A unit that included controller.h could reach any
field again; the shell growing back past its bound is what issue 32 took apart."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "csrc" / "controller"
UNITS = ["inbox", "fault_intake", "flow_runner", "elastic_state", "leadership", "cluster_requests", "event_log"]
SHELL_MAX_LINES = 400


def includes(path: Path) -> set:
    return set(re.findall(r'#include "([^"]+)"', path.read_text()))


def test_no_unit_includes_the_controller():
    for unit in UNITS:
        for path in CONTROLLER.glob(f"{unit}.*"):
            assert "controller/controller.h" not in includes(path), path.name
    # and the runner's only view of the controller is its host interface
    assert "class FlowHost" in (CONTROLLER / "flow_runner.h").read_text()
    assert "class InboxHost" in (CONTROLLER / "inbox.h").read_text()


def test_every_unit_is_a_member_of_the_shell_and_exists():
    header = (CONTROLLER / "controller.h").read_text()
    for unit in UNITS:
        assert list(CONTROLLER.glob(f"{unit}.h")), unit
        assert f'#include "controller/{unit}.h"' in header, unit


def test_the_shell_stays_small():
    lines = len((CONTROLLER / "controller.cpp").read_text().splitlines())
    assert lines <= SHELL_MAX_LINES, f"controller.cpp has {lines} lines (at most {SHELL_MAX_LINES})"
