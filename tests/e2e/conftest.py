"""Uninterrupted reference runs, trained once per test session and shared by the e2e tests; no process
of any run may be left once it ended."""
import fcntl
import os
from pathlib import Path

import pytest

from mindio_adaptor.tiny import job as tiny_job
from mindio_adaptor.tiny.job import load_params, parse_output, run_training

HA = ["--enable-high-availability"]
# "ha" and "ha_tp2" also name every micro-batch's samples (tests/e2e/test_elastic_scale_in.py compares
# them), and "ha" checks after every step that each optimizer shard's holders agree
# (tests/e2e/test_replica_parity.py reads it: one run fewer); neither changes a result (the check only
# reads and gathers digests; test_replica_parity's overlapped run, without it, ends on the same digest).
REFERENCE_FLAGS = {"plain": [], "ha": [*HA, "--log-sample-ids", "--verify-optimizer-replicas"],
                   "ha_tp2": [*HA, "--tensor-model-parallel-size", "2", "--log-sample-ids"],
                   "ha_no_replica": [*HA, "--distributed-optimizer-no-replica"],
                   # evaluating changes no training number: its validation lines are the reference's for a run
                   # that evaluates (tests/e2e/test_elastic_scale_in.py)
                   "ha_eval": [*HA, "--eval-iters", "2", "--eval-interval", "3"]}


@pytest.fixture(scope="session")
def reference_runs(tmp_path_factory):
    """name -> (RunResult, per-rank params) of an uninterrupted 8-step dp4 run, trained once per test run: the
    pytest-xdist workers share one folder, and the first worker that needs a reference trains it while the others
    wait on its lock (each worker training its own cost the suite one run per reference and worker)."""
    folder = shared_folder(tmp_path_factory)
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = trained_once(name, folder / f"reference_{name}")
        return cache[name]

    return get


def shared_folder(tmp_path_factory) -> Path:
    """The run's own temporary root, which every xdist worker's base folder (popen-gwN) sits in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def trained_once(name: str, folder: Path):
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, the worker's death included
        output = folder / "output.txt"
        if not output.exists():
            run = run_training([*REFERENCE_FLAGS[name], "--log-num-zeros-in-grad",
                                "--params-out", str(folder / "params")]).require_success()
            partial = output.with_suffix(".partial")
            partial.write_text(run.output)
            partial.rename(output)  # a worker killed mid-write leaves no reference
        return parse_output(0, output.read_text()), load_params(folder / "params")


@pytest.fixture(scope="module", autouse=True)
def no_process_left_behind():
    """Every end of a run, faulted or not, leaves no process of it alive (checked after each module:
    an autouse fixture of module scope is set up before the module's shared runs)."""
    before = len(tiny_job.LEFTOVERS)
    yield
    left = tiny_job.LEFTOVERS[before:]
    assert not left, f"processes left after runs of this module: {left}"
