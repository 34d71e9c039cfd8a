"""A parent script in its own process, killed with SIGKILL, and the helpers it started expected to end with it
(core/process/orphan_guard, core/process/script_free_spawn)."""
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def parent_running(script_text: str, tmp_path: Path, *args: str):
    """The script (formatted with {repo}) running as its own process, stdout piped; killed if still alive after."""
    script = tmp_path / "parent.py"
    script.write_text(script_text.format(repo=str(REPO)))
    parent = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)
    try:
        yield parent
    finally:
        if parent.poll() is None:
            parent.kill()


def kill_and_expect_ended(parent: subprocess.Popen, helpers) -> None:
    """SIGKILL the parent; each of `helpers` (psutil processes) must end within 10 s (TimeoutExpired if not)."""
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=5)
    for helper in helpers:
        helper.wait(timeout=10)
