"""A hot switch asked of the real controller (csrc/controller/controller_hot_switch.cpp) with four native
processors in this process, each stepped by a thread: what is refused and why (nothing changes then), and a
switch withdrawn ("stop switch") while the ranks train toward its step. Asked through the reference API and
through the status server's command (mindio-adaptor drain). The switch itself, on the real Megatron under the
launcher, is tests/e2e/test_hot_switch.py."""
import pytest

from controller_harness import end_in_process_job, in_process_job, wait_until
from mindio_adaptor.cli import main as cli_main
from mindio_adaptor.cli.status_client import request_json
from mindio_adaptor.status.controller_source import start_if_asked
from mindio_adaptor.ttp import controller as ctl
from test_pause_native_ranks import SteppingRanks, events

pytestmark = pytest.mark.integration
N = 4
TOKEN = "hot-switch-test-token-0123456789abcdef"


def stepping_job(enable_arf):
    procs = in_process_job(N, enable_arf=enable_arf)
    ranks = SteppingRanks(procs).start()
    wait_until(lambda: min(ranks.steps) >= 3, 20, "three steps")
    return procs, ranks


@pytest.fixture
def job(job_env):
    procs, ranks = stepping_job(enable_arf=True)
    yield ranks
    ranks.stop()
    end_in_process_job(procs)


def test_without_process_replacement_a_hot_switch_is_refused(job_env, monkeypatch):
    procs, ranks = stepping_job(enable_arf=False)
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    server = start_if_asked(port=0)
    try:
        with pytest.raises(SystemExit, match=r"409 hot switch refused: process replacement \(ARF, "
                                             r"--enable-worker-reboot\) is off"):
            cli_main(["drain", "--controller", "%s:%d" % server.address, "--token", TOKEN, "--rank", "1"])
        assert ctl.controller_state() == "NORMAL" and not events("hot_switch_asked")
    finally:
        server.stop()
        ranks.stop()
        end_in_process_job(procs)


def test_a_request_that_cannot_be_done_is_refused_naming_why(job, monkeypatch):
    monkeypatch.setenv("MINDIO_TOKEN", TOKEN)
    server = start_if_asked(port=0)
    address = "%s:%d" % server.address
    try:
        for ranks, why in [([9], "rank 9 is not a rank of this job \\(world size 4\\)"),
                           ([0, 1, 2, 3], "every live rank is named"),
                           ([1, 3], "some shard of ranks \\[1,3\\] has no live replica peer outside them")]:
            with pytest.raises(SystemExit, match=f"409 hot switch refused: {why}"):
                request_json(address, TOKEN, "/hot_switch", {"ranks": ranks})
        with pytest.raises(SystemExit, match="400 no live rank runs on node 'rack9'"):
            request_json(address, TOKEN, "/hot_switch", {"node": "rack9"})
        with pytest.raises(SystemExit, match="400 name either ranks or a node"):
            request_json(address, TOKEN, "/hot_switch", {"ranks": [1], "node": "rack9"})
        with pytest.raises(SystemExit, match="400 ranks \\[\\]: expected a non-empty list"):
            request_json(address, TOKEN, "/hot_switch", {"ranks": []})
        with pytest.raises(SystemExit, match=r"409 hot switch refused: rank \d already completed step \d+"):
            request_json(address, TOKEN, "/hot_switch", {"ranks": [1], "after_step": 1})
        with pytest.raises(SystemExit, match="401 a command needs the job's token"):
            request_json(address, "wrong", "/hot_switch", {"ranks": [1]})
        assert ctl.controller_state() == "NORMAL" and not events("hot_switch_asked")
    finally:
        server.stop()


def test_a_switch_withdrawn_before_every_rank_holds_changes_nothing(job):
    target = max(job.steps) + 40
    ctl.hot_switch([1], after_step=target)
    with pytest.raises(ValueError, match="hot switch refused: a pause or a hot switch is already asked for"):
        ctl.hot_switch([2])
    assert ctl.tft_notify_controller_prepare_action("stop switch") == 0
    assert events("hot_switch_withdrawn") == ["ranks [1]"]
    wait_until(lambda: min(job.steps) > target, 30, "training past the withdrawn switch's step")
    assert not job.errors and ctl.controller_state() == "NORMAL"
    assert not events("hot_switch") and not events("fault")
    with pytest.raises(ValueError, match="stop switch refused: no hot switch is asked for"):
        ctl.tft_notify_controller_prepare_action("stop switch")
