"""A live rank that a scale-in drops with its data-parallel slice leaves the job (core/detection/leaving_rank): its
REBUILD_GROUP (stages/scale_in_groups) raises LeavingTheJob, the answer to the controller is LEAVES_THE_JOB
(recovery/flows), and its parked wait ends the process with LEFT_THE_JOB and one line saying why
(recovery/decision_wait). A rank whose process hosts the job's controller cannot leave: refused."""
import logging
import re

import pytest

from recovery_fakes import FakeMegatron, action, session_at
from mindio_adaptor.core.job import processor_link
from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB
from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob
from mindio_adaptor.core.job.processor_link import LEAVES_THE_JOB, ControllerAction, ControllerDecision
from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.scale_in_plan import ScaleInRefused, plan_scale_in
from mindio_adaptor.recovery import decision_wait, flows, scale_in
from mindio_adaptor.recovery.stages.scale_in_groups import scale_in_groups
from mindio_adaptor.ttp import controller

# tp2 x dp2: data-parallel lists [0, 2] and [1, 3]; rank 3 lost, so rank 2 (same slice, index 1) is dropped
PLAN = plan_scale_in([[0, 2], [1, 3]], {3}, global_batch_size=16, micro_batch_size=2)


@pytest.fixture
def dropped_rank():
    session = session_at(4)
    session.job.layout = ReplicaLayout.from_dp_lists([[0, 2], [1, 3]], 2)
    return session, FakeMegatron(rank=2, world_size=4, context_parallel_size=1, global_batch_size=16,
                                 micro_batch_size=2)


def test_a_rank_of_a_lost_slice_leaves_naming_rank_step_time_and_why(dropped_rank):
    assert PLAN.dropped == (2,) and PLAN.survivors == (0, 1)
    session, megatron = dropped_rank
    with pytest.raises(LeavingTheJob) as leaving:
        scale_in_groups(session, megatron, action("rebuild_group", strategy="scale_in", error_ranks=(3,)))
    assert re.fullmatch(r"elastic training: rank 2 leaves the job after step 4 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: "
                        r"its data-parallel slice lost a rank \(ranks \[3\] were lost and not replaced\); the job "
                        r"goes on without it, dp2 -> dp1 \(data-parallel indices \[1\] lost a rank; survivors "
                        r"\[0, 1\], 8 micro-batches each; optimizer replicas R=2 -> R=1: the job has no replica now, its next "
                        r"fault ends in the dump\)", str(leaving.value)), str(leaving.value)
    assert megatron.calls == [] and session.scale_in is None  # nothing of the job was touched


def test_the_rank_hosting_the_jobs_controller_cannot_leave(dropped_rank, monkeypatch):
    monkeypatch.setattr(controller, "tft_query_high_availability_switch", lambda: True)
    with pytest.raises(ScaleInRefused, match="rank 2 is in a data-parallel slice that lost a rank, and the job's "
                                             "controller runs in its process: it cannot leave"):
        scale_in_groups(*dropped_rank, action("rebuild_group", strategy="scale_in", error_ranks=(3,)))


class AnsweringLink:
    def __init__(self, rank):
        self.rank, self.handler = rank, None

    def on_action(self, handler, answers=()):
        self.handler = handler


def test_the_answer_to_rebuild_group_says_it_leaves_and_the_session_remembers_why(monkeypatch):
    def leave(session, megatron, act):
        raise LeavingTheJob("rank 2 leaves the job after step 4")

    monkeypatch.setattr(flows, "run_action", leave)
    session, link = session_at(4), AnsweringLink(rank=2)
    flows.answer_actions(session, link, FakeMegatron())
    assert link.handler(ControllerAction("rebuild_group", "scale_in", error_ranks=(3,))) == (
        LEAVES_THE_JOB, "rank 2: rank 2 leaves the job after step 4")
    assert session.leaving == "rank 2 leaves the job after step 4"
    assert LEAVES_THE_JOB not in (0, 1, 2)  # neither success, a failure, nor CLEAN's "no rebuild needed"


class ParkedLink:
    """The processor link of a parked rank: the controller sends it nothing after its leaving reply."""

    def __init__(self):
        self.waits = 0

    def report_fault(self, state, code=""):
        pass

    def connected(self):
        return True

    def await_decision(self, timeout_s=None, between=None, wake=None):
        while self.waits < 100:
            self.waits += 1
            between()
        return ControllerDecision(False, "exit", 4)


def test_a_parked_rank_that_leaves_exits_left_the_job_with_one_line(monkeypatch, caplog):
    link = ParkedLink()
    monkeypatch.setattr(processor_link, "current", lambda: link)
    session = session_at(4)
    session.thread.stop_requested.set()
    session.leaving = "elastic training: rank 2 leaves the job after step 4 at 2026-11-25 00:00:00 UTC: why"
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as ended:
        decision_wait.wait_for_decision(session, RuntimeError("FORCE STOP"), 5)
    assert ended.value.code == LEFT_THE_JOB and link.waits == 1
    said = [r.getMessage() for r in caplog.records if "leaves the job" in r.getMessage()]
    assert said == [f"{session.leaving}; this process exits (code {LEFT_THE_JOB}, LEFT_THE_JOB: not restarted, the "
                    f"job goes on)"]


class DecidedLink(ParkedLink):
    def __init__(self, strategy):
        super().__init__()
        self.decided = strategy

    def await_decision(self, timeout_s=None, between=None, wake=None):
        return ControllerDecision(False, self.decided, 6)


@pytest.mark.parametrize("strategy, code", [("scale_out", LEFT_THE_JOB), ("exit", ENDED_BY_CONTROLLER)])
def test_a_returned_process_sent_away_leaves_and_an_ended_job_ends(monkeypatch, caplog, strategy, code):
    """A returned process told to exit because the scale-out did not happen (the EXIT of strategy scale_out)
    leaves (87: not restarted, the job goes on); any other EXIT ends it as the job's end (86)."""
    monkeypatch.setattr(processor_link, "current", lambda: DecidedLink(strategy))
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as ended:
        decision_wait.wait_for_decision(session_at(None), RuntimeError("ARF FINISH"), 6, replacement=True)
    assert ended.value.code == code
    sent_away = [r for r in caplog.records if "this returned process is sent away" in r.getMessage()]
    assert len(sent_away) == (1 if strategy == "scale_out" else 0)
