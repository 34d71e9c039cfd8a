"""Uninterrupted reference runs, trained once per test session and shared by the e2e tests; no process
of any run may be left once it ended."""
import pytest

from mindio_adaptor.tiny import job as tiny_job
from mindio_adaptor.tiny.job import load_params, run_training

HA = ["--enable-high-availability"]
# "ha" and "ha_tp2" also name every micro-batch's samples (tests/e2e/test_elastic_scale_in.py compares
# them), and "ha" checks after every step that each optimizer shard's holders agree
# (tests/e2e/test_replica_parity.py reads it: one run fewer); neither changes a result (the check only
# reads and gathers digests; test_replica_parity's overlapped run, without it, ends on the same digest).
REFERENCE_FLAGS = {"plain": [], "ha": [*HA, "--log-sample-ids", "--verify-optimizer-replicas"],
                   "ha_tp2": [*HA, "--tensor-model-parallel-size", "2", "--log-sample-ids"],
                   "ha_no_replica": [*HA, "--distributed-optimizer-no-replica"]}


@pytest.fixture(scope="session")
def reference_runs(tmp_path_factory):
    """name -> (RunResult, per-rank params) of an uninterrupted 8-step dp4 run."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(f"reference_{name}")
            run = run_training([*REFERENCE_FLAGS[name], "--log-num-zeros-in-grad",
                                "--params-out", str(out)]).require_success()
            cache[name] = (run, load_params(out))
        return cache[name]

    return get


@pytest.fixture(scope="module", autouse=True)
def no_process_left_behind():
    """Every end of a run, faulted or not, leaves no process of it alive (checked after each module:
    an autouse fixture of module scope is set up before the module's shared runs)."""
    before = len(tiny_job.LEFTOVERS)
    yield
    left = tiny_job.LEFTOVERS[before:]
    assert not left, f"processes left after runs of this module: {left}"
