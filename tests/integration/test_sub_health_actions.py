"""Sub-health signals acted on by policy (status/sub_health_responder) with the real controller and four native
processors in this process, each stepped by a thread: a rank's sub-health report MINDIO-SDC under
subHealthyStrategy hotSwitch asks the controller for a hot switch of that rank, which holds every rank after the
next step; under ignore it is only said. The hot switch itself on the real Megatron is tests/e2e/test_hot_switch.py."""
import pytest

from controller_harness import end_in_process_job, in_process_job, wait_until
from mindio_adaptor.status.sub_health_responder import SubHealthResponder
from mindio_adaptor.ttp import controller as ctl
from test_pause_native_ranks import SteppingRanks, events

pytestmark = pytest.mark.integration
N = 4
SUB_HEALTH = 9  # ReportState SUB_HEALTH


@pytest.fixture
def job(job_env):
    procs = in_process_job(N, enable_arf=True)
    ranks = SteppingRanks(procs).start()
    wait_until(lambda: min(ranks.steps) >= 3, 20, "three steps")
    yield procs, ranks
    ranks.stop()
    end_in_process_job(procs)


def test_a_corrupting_rank_is_hot_switched_under_the_hot_switch_strategy(job):
    procs, ranks = job
    said = []
    responder = SubHealthResponder.from_env(ctl, {"MINDIO_SUB_HEALTHY_STRATEGY": "hotSwitch"}, say=said.append)
    procs[1].report_error(SUB_HEALTH, "MINDIO-SDC")
    wait_until(lambda: events("sub_health"), 10, "the sub-health report")
    responder.poll()
    assert said == ["sub-health policy: rank 1 MINDIO-SDC -> SubHealthFault -> hot switch: asked for"]
    assert events("hot_switch_asked") and events("hot_switch_asked")[0].startswith("ranks [1] after step ")
    wait_until(lambda: events("hot_switch"), 20, "every rank holding for the switch")


def test_under_ignore_the_signal_is_only_said(job):
    procs, ranks = job
    said = []
    responder = SubHealthResponder.from_env(ctl, {}, say=said.append)
    procs[2].report_error(SUB_HEALTH, "MINDIO-SDC")
    wait_until(lambda: events("sub_health"), 10, "the sub-health report")
    responder.poll()
    assert said == ["sub-health policy: rank 2 MINDIO-SDC -> SubHealthFault -> warn"]
    assert not events("hot_switch_asked") and ctl.controller_state() == "NORMAL"
    before = min(ranks.steps)
    wait_until(lambda: min(ranks.steps) > before + 2, 10, "training going on")
