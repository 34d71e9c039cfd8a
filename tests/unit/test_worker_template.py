"""The worker template (launch/worker_template, launch/forked_workers) with real processes: a worker is forked
from what the template imported once, and it is this process's own child, as a Popen'ed worker would be."""
import ctypes
import json
import os
import signal
import sys
import textwrap

import psutil
import pytest

from mindio_adaptor.launch.forked_workers import ForkedWorker, WorkerTemplate
from tests.unit.killed_parents import kill_and_expect_ended, parent_running

PR_GET_CHILD_SUBREAPER = 37

# Imported by the template; each import appends a line to the marker file.
PRELOADED = """
import os
with open(os.environ["MARKER"], "a") as marker:
    marker.write(f"imported in {os.getpid()}\\n")
VALUE = 42
"""

WORKER = """
import json, os, sys
import preloaded_for_test
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "argv": sys.argv,
                  "rank": os.environ.get("RANK"), "value": preloaded_for_test.VALUE,
                  "main": __name__}), flush=True)
if sys.argv[1:2] == ["sleep"]:
    import time
    time.sleep(60)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


@pytest.fixture
def job(tmp_path):
    (tmp_path / "preloaded_for_test.py").write_text(PRELOADED)
    (tmp_path / "worker.py").write_text(WORKER)
    path = f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "MARKER": str(tmp_path / "marker"), "PYTHONPATH": path}
    template = WorkerTemplate("preloaded_for_test", env)
    yield template, tmp_path, env
    template.close()


def _subreaper_now() -> int:
    value = ctypes.c_int(-1)
    ctypes.CDLL(None, use_errno=True).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)
    return value.value


def _start(template, tmp_path, env, *args, **extra_env):
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    worker = template.spawn([sys.executable, "-u", str(tmp_path / "worker.py"), *args], {**env, **extra_env}, str(out))
    assert isinstance(worker, ForkedWorker)
    return worker, out


def test_a_worker_is_this_process_child_and_runs_the_script_as_main_with_its_own_env(job):
    template, tmp_path, env = job
    worker, out = _start(template, tmp_path, env, "a", "b", RANK="3", EXIT_CODE="7")
    assert psutil.Process(worker.pid).ppid() == os.getpid()  # adopted while it runs
    assert worker.wait(timeout=30) == 7
    said = json.loads(out.read_text())
    assert said["pid"] == worker.pid and said["ppid"] == os.getpid()
    assert said["pgid"] == worker.pid  # its own process group, as start_new_session gives
    assert said["argv"] == [str(tmp_path / "worker.py"), "a", "b"] and said["rank"] == "3"
    assert said["main"] == "__main__" and said["value"] == 42
    assert _subreaper_now() == 0  # only while a worker is being forked


def test_the_preloaded_module_is_imported_once_for_every_worker(job):
    template, tmp_path, env = job
    workers = [_start(template, tmp_path, env)[0] for _ in range(3)]
    assert [w.wait(timeout=30) for w in workers] == [0, 0, 0]
    assert (tmp_path / "marker").read_text() == f"imported in {template.proc.pid}\n"
    assert not [c for c in psutil.Process(template.proc.pid).children() if c.status() == psutil.STATUS_ZOMBIE]


def test_a_killed_worker_reads_as_killed_and_a_timeout_as_subprocess_does(job):
    import subprocess

    template, tmp_path, env = job
    worker, _ = _start(template, tmp_path, env, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(timeout=0.2)
    os.killpg(worker.pid, signal.SIGKILL)  # as the launchers stop a worker's group
    assert worker.wait(timeout=10) == -signal.SIGKILL
    assert worker.poll() == -signal.SIGKILL


def test_no_worker_from_a_program_that_is_not_python_or_an_ended_template(job):
    template, tmp_path, env = job
    assert template.spawn(["/bin/true"], env) is None
    assert template.spawn([sys.executable, str(tmp_path / "worker.py")], env) is None  # not -u: not torchrun's form
    template.close()
    assert template.proc.poll() == 0  # EOF ended it
    assert template.spawn([sys.executable, "-u", str(tmp_path / "worker.py")], env) is None


def test_the_template_ends_with_its_launcher(tmp_path):
    parent = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, {repo!r})
        from mindio_adaptor.launch.forked_workers import WorkerTemplate
        template = WorkerTemplate("json", dict(os.environ))
        print(template.proc.pid, flush=True)
        time.sleep(120)
    """)
    with parent_running(parent, tmp_path) as launcher:
        template = psutil.Process(int(launcher.stdout.readline()))
        kill_and_expect_ended(launcher, [template])
