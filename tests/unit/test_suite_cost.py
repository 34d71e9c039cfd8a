"""The cost table of tests/suite_cost.py on a generated test tree, run by pytest in a subprocess: a table that names the
wrong module, drops the module-scoped part, misses the children's CPU or loses its figures on the way from a
pytest-xdist worker would mislead whoever evens out the suite's modules by it."""
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]  # where suite_cost.py is

GENERATED_MODULES = {
    "test_sleeps.py": dedent("""\
        import time

        def test_sleeps():
            time.sleep(1)
        """),
    # The CPU is a child's, which the module's own process only waits for: as a Megatron job's is.
    "test_burns.py": dedent("""\
        import subprocess, sys

        BURN = "import time\\nend = time.process_time() + 0.5\\nwhile time.process_time() < end: pass"

        def test_burns():
            subprocess.run([sys.executable, "-c", BURN], check=True)
        """),
    "test_pair.py": dedent("""\
        def test_one():
            pass

        def test_two():
            pass
        """),
}


def run_pytest(root, *args):
    (root / "tests").mkdir()
    for name, text in GENERATED_MODULES.items():
        (root / "tests" / name).write_text(text)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    # Without the outer run's PYTEST_* (xdist's worker id, addopts): the inner run is a developer's plain run.
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")]),
               MINDIO_SUITE_COST_FILE=str(root / "cost.md"))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_cost", *args]
    ran = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout


def module_rows(output):
    """module -> (tests, wall s, CPU s) from the table's lines."""
    cells = [line.strip("|").split("|") for line in output.splitlines() if line.startswith("| tests/")]
    return {name.strip(): (int(tests), float(wall), float(cpu)) for name, tests, wall, cpu in cells}


@pytest.mark.parametrize("workers", [["-n", "2", "--dist", "loadfile"], ["-n", "0"]], ids=["xdist", "in-process"])
def test_a_full_run_lists_every_module_and_writes_the_table(tmp_path, workers):
    output = run_pytest(tmp_path, *workers)

    rows = module_rows(output)
    assert set(rows) == {f"tests/{name}" for name in GENERATED_MODULES}, output
    assert [rows[f"tests/{name}"][0] for name in GENERATED_MODULES] == [1, 1, 2]
    assert rows["tests/test_sleeps.py"][1] >= 1, output
    assert rows["tests/test_burns.py"][2] >= 0.4, output
    # Most expensive first, as the developer reads it.
    assert [wall for _, wall, _ in rows.values()] == sorted((wall for _, wall, _ in rows.values()), reverse=True)
    written = (tmp_path / "cost.md").read_text().splitlines()
    assert written and all(line in output.splitlines() for line in written), output


def test_a_run_narrowed_by_k_prints_its_modules_and_writes_no_table(tmp_path):
    output = run_pytest(tmp_path, "-n", "0", "-k", "pair")

    assert module_rows(output) == {"tests/test_pair.py": (2, pytest.approx(0, abs=0.5), pytest.approx(0, abs=0.5))}
    assert not (tmp_path / "cost.md").exists()
    assert "MINDIO_SUITE_COST_FILE: not written, not a full run" in output
