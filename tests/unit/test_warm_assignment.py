"""Warm spares that run ahead (launch/warm_pool, core/layout/warm_assignment, patches/warm_rank): which scripts run
ahead, which models a stand-in rank may build, how the rank is taken, and how a run's log counts its start.
The whole path on the real Megatron is in tests/e2e/test_process_replacement.py and test_node_loss.py."""
import io
import json
import os
from types import SimpleNamespace

import pytest

from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.launch.args import build_parser
from mindio_adaptor.launch.config import resolve
from mindio_adaptor.launch.warm_pool import runs_ahead as pool_runs_ahead
from mindio_adaptor.launch.warm_worker import DEFAULT_PRELOAD
from mindio_adaptor.patches.warm_rank import runs_ahead, stand_in
from mindio_adaptor.recovery.session import SESSION
from mindio_adaptor.tiny.job import process_ids


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def config(*argv):
    return resolve(build_parser().parse_args(list(argv)), {})


def test_only_a_script_under_the_adaptors_worker_reboot_runs_ahead(script):
    assert pool_runs_ahead(config("--spare-workers", "1", script, "--enable-high-availability",
                                  "--enable-worker-reboot"))
    # worker reboot from the launcher's flag alone: the script may be anything, it must know its rank at start
    assert not pool_runs_ahead(config("--spare-workers", "1", "--worker-reboot", script))
    # the adaptor's patches are not preloaded: nothing would stop the script at the wait points
    assert not pool_runs_ahead(config("--spare-workers", "1", "--warm-preload", "torch", script,
                                      "--enable-worker-reboot"))
    assert not pool_runs_ahead(config("--spare-workers", "1", "--worker-reboot", "--no-python", "/bin/true",
                                      "--enable-worker-reboot"))
    assert "mindio_adaptor:patch_all" in DEFAULT_PRELOAD


@pytest.mark.parametrize("sizes, ahead", [
    ({}, True),
    ({"tensor_model_parallel_size": 2}, False),
    ({"pipeline_model_parallel_size": 2}, False),
    ({"context_parallel_size": 2}, False),
    ({"expert_model_parallel_size": 2}, False),
    ({"enable_worker_reboot": False}, False),
])
def test_a_stand_in_builds_the_model_only_with_data_parallelism_alone(sizes, ahead, monkeypatch):
    # the job's settings as validated (patches/arguments), and Megatron's sizes
    settings = {k: v for k, v in sizes.items() if k in HighAvailabilityConfig.__dataclass_fields__}
    monkeypatch.setattr(SESSION, "config", HighAvailabilityConfig(**{
        "enable_high_availability": True, "enable_worker_reboot": True, **settings}))
    margs = SimpleNamespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
                            expert_model_parallel_size=1)
    vars(margs).update({k: v for k, v in sizes.items() if k not in settings})
    assert runs_ahead(margs, accelerator=False) is ahead
    assert not runs_ahead(margs, accelerator=True)  # the device is the local rank's: known only with the rank


def test_the_stand_in_parses_as_its_rank_and_takes_the_real_one_from_stdin(monkeypatch, capsys):
    monkeypatch.setattr(warm_assignment, "_state", {"assigned": False, "began": 0.0})
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv(warm_assignment.ENV_WARM_RANK, "1")
    assert warm_assignment.provisional()
    margs = SimpleNamespace(rank=0)
    stand_in(margs)
    assert margs.rank == 1
    env = {"RANK": "3", "LOCAL_RANK": "3", "MASTER_PORT": "4242", "PATH": os.environ.get("PATH", "")}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"env": env, "argv": ["train.py"]}) + "\n"))
    saved = dict(os.environ)
    try:
        assignment = warm_assignment.await_assignment()
        assert warm_assignment.adopt(assignment, "the model built as stand-in rank 1") == 3
        assert dict(os.environ) == env and not warm_assignment.provisional()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    line = capsys.readouterr().err
    assert f"[mindio-warm pid {os.getpid()}] takes rank 3 after" in line and "stand-in rank 1" in line
    # the line is the rank's start in a run's log (the stand-in's own start line says "rank ?")
    me = os.getpid()
    log = f"rank ? pid {me} starting\nrank 3 pid 55 starting\n{line}rank 3 pid {me} done\n"
    assert process_ids(log) == {3: {"starting": [55, me], "done": [me]}}


def test_eof_means_the_spare_is_not_needed(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert warm_assignment.await_assignment() is None
