"""recovery/flows: the one table of which stages each action of each flow runs, and how an action
reaches its stages (on the parked training thread, or on the processor's thread)."""
import threading

import pytest

from recovery_fakes import FakeMegatron, session_at
from mindio_adaptor.core.detection.enums import RepairType
from mindio_adaptor.core.job.processor_link import ControllerAction, RepairAssignment, SaveAssignment
from mindio_adaptor.recovery import flows
from mindio_adaptor.recovery.flows import FLOWS, NoSuchStep, flow_of, run_action, stages_of
from mindio_adaptor.recovery.stages.stage import RecoveryAction, Stage

ROLLBACK = ["roll back", "log the repair step", "save the repair step"]
EVERY_FLOW = {
    "retry": {"stop": ["stop"], "clean": ["repair fault point", "rebuild groups"], "repair": ["repair from peer"],
              "rollback": ROLLBACK, "exit": ["end even if hung"]},
    "reload": {"stop": ["stop"], "clean": ["repair fault point", "rebuild groups"], "repair": ["reload checkpoint"],
               "rollback": ROLLBACK, "exit": ["end even if hung"]},
    "recover": {"stop": ["stop"], "clean": ["repair fault point", "drop gradients"], "rebuild_group": ["rebuild groups"],
                "repair": ["repair from peer"], "rollback": ROLLBACK, "exit": ["end even if hung"]},
    # A hot switch is a process replacement whose leaving ranks are alive: they stop and clean, then exit.
    "hot_switch": {"stop": ["stop"], "clean": ["repair fault point", "drop gradients"],
                   "rebuild_group": ["rebuild groups"], "repair": ["repair from peer"], "rollback": ROLLBACK,
                   "exit": ["end even if hung"]},
    "dump": {"stop": ["stop"], "save_ckpt": ["save dump"], "rename": ["publish dump"], "exit": ["end even if hung"]},
    "scale_in": {"stop": ["stop"], "save_ckpt": ["scale in: save"], "rename": ["scale in: publish"],
                 "rebuild_group": ["scale in: groups"], "repair": ["scale in: state"], "rollback": ROLLBACK,
                 "exit": ["end even if hung"]},
    "scale_out": {"stop": ["stop"], "clean": ["rebuild groups"], "save_ckpt": ["scale out: save"],
                  "rebuild_group": ["scale out: groups"], "repair": ["scale out: state"], "rollback": ROLLBACK,
                  "exit": ["end even if hung"]},
    "exit": {"stop": ["stop"], "exit": ["end even if hung"]},
    "none": {"stop": ["stop"], "exit": ["end even if hung"]},
}


def repair_info(repair_type):
    return RepairAssignment(repair_type, (0,), (2,), (0,), (0, 2))


def test_every_strategys_stage_table():
    assert {flow: {name: [s.name for s in stages] for name, stages in actions.items()}
            for flow, actions in FLOWS.items()} == EVERY_FLOW
    for flow, actions in EVERY_FLOW.items():
        strategy = "retry" if flow == "reload" else flow
        for name, expected in actions.items():
            repair = repair_info(RepairType.LOAD_CKPT if flow == "reload" else RepairType.RECV_REPAIR) \
                if name == "repair" else None
            got = stages_of(RecoveryAction(name, strategy=strategy, repair=repair))
            assert [s.name for s in got] == expected, (flow, name)


def test_only_a_repair_from_the_last_checkpoint_is_the_reload_flow():
    assert flow_of("retry", repair_info(RepairType.LOAD_CKPT)) == "reload"
    assert flow_of("retry", repair_info(RepairType.SEND)) == "retry"
    assert flow_of("recover", repair_info(RepairType.LOAD_CKPT)) == "recover"
    assert flow_of("retry") == "retry"


def test_an_action_outside_its_flow_is_refused_naming_the_flow():
    with pytest.raises(NoSuchStep, match=r"save_ckpt is not a step of the retry flow \(stop, clean, repair, "
                                         r"rollback, exit\)"):
        stages_of(RecoveryAction("save_ckpt", strategy="retry"))
    with pytest.raises(NoSuchStep, match="the controller's strategy is 'elastic', which has no flow here"):
        stages_of(RecoveryAction("stop", strategy="elastic"))


def test_stages_run_in_order_each_on_its_thread(monkeypatch):
    ran = []

    def stage(name):
        return lambda session, megatron, action: ran.append((name, threading.current_thread().name, action.step))

    monkeypatch.setitem(FLOWS, "test", {"repair": (Stage("a", stage("a"), on_training_thread=False),
                                                   Stage("b", stage("b")), Stage("c", stage("c")))})
    session = session_at(3)
    session.thread.parked.set()

    def training_thread():  # a parked training thread serving the posted stages
        while len(ran) < 3:
            session.thread.run_jobs(0.05)

    worker = threading.Thread(target=training_thread, name="training")
    worker.start()
    assert run_action(session, FakeMegatron(), RecoveryAction("repair", strategy="test", step=3)) == 0
    worker.join(5)
    assert ran == [("a", threading.current_thread().name, 3), ("b", "training", 3), ("c", "training", 3)]


def test_a_failing_stage_ends_the_action_with_its_error(monkeypatch):
    def fail(session, megatron, action):
        raise RuntimeError("rank 2's shard is gone")

    later = []
    monkeypatch.setitem(FLOWS, "test", {"stop": (Stage("fail", fail, on_training_thread=False),
                                                 Stage("later", lambda *a: later.append(a), on_training_thread=False))})
    with pytest.raises(RuntimeError, match="rank 2's shard is gone"):
        run_action(session_at(3), FakeMegatron(), RecoveryAction("stop", strategy="test"))
    assert later == []


class FakeLink:
    """The processor link as the answering side sees it: a rank, and the handler it is given."""

    def __init__(self, rank):
        self.rank, self.handler, self.answers = rank, None, ()

    def on_action(self, handler, answers=()):
        self.handler, self.answers = handler, answers


def test_each_controller_action_becomes_this_ranks_actions(monkeypatch):
    actions = []
    monkeypatch.setattr(flows, "run_action", lambda session, megatron, action: actions.append(action) or 0)
    link = FakeLink(rank=2)
    flows.answer_actions(session_at(3), link, FakeMegatron())
    plan = {"optimizer_type": 0, "repair_type": RepairType.RECV_REPAIR, "src": [0], "dst": [2], "rank_list": [0, 2]}
    wire = [{"name": "stop"}, {"name": "clean", "is_uce": True}, {"name": "rebuild_group", "error_ranks": [2]},
            {"name": "repair", "step": 3, "need_rebuild": True, "error_ranks": [2], "repair": [plan]},
            {"name": "rollback", "step": 3}, {"name": "save_ckpt", "step": 3, "save": [{"optimizer_type": 0,
                                                                                         "ranks": [0, 1]}]},
            {"name": "rename", "step": 3}, {"name": "exit"}]
    results = [link.handler(ControllerAction.from_wire(w, "recover")) for w in wire]
    assert results == [(0, "")] * 8
    assert set(link.answers) == {w["name"] for w in wire}
    info = repair_info(RepairType.RECV_REPAIR)
    assert actions == [RecoveryAction("stop", "recover"), RecoveryAction("clean", "recover"),
                       RecoveryAction("rebuild_group", "recover", error_ranks=(2,)),
                       RecoveryAction("repair", "recover", step=3, repair=info, error_ranks=(2,)),
                       RecoveryAction("rollback", "recover", step=3),
                       RecoveryAction("save_ckpt", "recover", step=3, saves=(SaveAssignment(0, (0, 1)),)),
                       RecoveryAction("rename", "recover", step=3), RecoveryAction("exit", "recover")]
    actions.clear()
    for recorded in ("normal", "pause", "continue", "prelock"):  # the processor records these itself
        assert link.handler(ControllerAction(recorded, "retry", step=3)) == (0, "")
    assert actions == []


def test_a_failing_stage_is_the_reply_naming_rank_action_and_error(monkeypatch):
    def fail(session, megatron, action):
        raise RuntimeError("no peer holds the shard")

    monkeypatch.setattr(flows, "run_action", fail)
    link = FakeLink(rank=5)
    flows.answer_actions(session_at(3), link, FakeMegatron())
    assert link.handler(ControllerAction("rollback", "retry", step=3)) == (
        1, "rank 5 action rollback: RuntimeError: no peer holds the shard")


def test_a_rank_sending_one_type_and_receiving_another_runs_repair_once_per_type(monkeypatch):
    actions = []
    monkeypatch.setattr(flows, "run_action", lambda session, megatron, action: actions.append(action) or 0)
    plan = (RepairAssignment(RepairType.SEND, (1,), (0,), (0,), (0, 1)),
            RepairAssignment(RepairType.UCE_HIGHLEVEL, (2,), (1,), (1,), (1, 2)))
    assert flows.recovery_actions(ControllerAction("repair", "retry", step=4, repairs=plan), 1) == [
        RecoveryAction("repair", "retry", step=4, repair=RepairAssignment(RepairType.SEND, (1,), (0,), (0,), (0, 1)),
                       error_ranks=(0,)),
        RecoveryAction("repair", "retry", step=4, error_ranks=(1,),
                       repair=RepairAssignment(RepairType.UCE_HIGHLEVEL, (2,), (1,), (1,), (1, 2)))]


def test_the_flow_of_a_recovery_is_named_by_stop_and_made_reload_by_a_checkpoint_repair(monkeypatch):
    monkeypatch.setitem(FLOWS, "retry", {name: () for name in ("stop", "clean", "repair", "rollback")})
    monkeypatch.setitem(FLOWS, "reload", {name: () for name in ("stop", "clean", "repair", "rollback")})
    session, megatron = session_at(4), FakeMegatron()
    steps = [RecoveryAction("stop", "retry"), RecoveryAction("clean", "retry"),
             RecoveryAction("repair", "retry", step=3, repair=repair_info(RepairType.LOAD_CKPT)),
             RecoveryAction("rollback", "retry", step=3)]
    flows = []
    for action in steps:
        run_action(session, megatron, action)
        flows.append(session.flow)
    assert flows == ["retry", "retry", "reload", "reload"]
    run_action(session, megatron, RecoveryAction("stop", "retry"))  # the next recovery starts afresh
    assert session.flow == "retry"


def test_a_scale_in_after_a_recover_is_its_own_flow_from_its_first_action(monkeypatch):
    monkeypatch.setitem(FLOWS, "recover", {name: () for name in ("stop", "clean")})
    monkeypatch.setitem(FLOWS, "scale_in", {name: () for name in ("save_ckpt", "rebuild_group")})
    session, megatron = session_at(4), FakeMegatron()
    run_action(session, megatron, RecoveryAction("stop", "recover"))
    run_action(session, megatron, RecoveryAction("clean", "recover"))
    assert session.flow == "recover"
    run_action(session, megatron, RecoveryAction("rebuild_group", "scale_in"))  # a survivor that saves nothing
    assert session.flow == "scale_in"


def test_a_recovery_after_a_scale_in_is_refused_naming_it(monkeypatch):
    from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in

    monkeypatch.setitem(FLOWS, "retry", {name: () for name in ("stop", "clean", "exit")})
    session, megatron = session_at(6), FakeMegatron()
    session.flow = "scale_in"
    session.scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    run_action(session, megatron, RecoveryAction("stop", "retry"))  # stopping is still answered
    with pytest.raises(flows.AfterScaleIn, match=r"clean \(retry\): a recovery after a scale-in \(dp4 -> dp2"):
        run_action(session, megatron, RecoveryAction("clean", "retry"))
    run_action(session, megatron, RecoveryAction("exit", "retry"))


def test_the_dump_after_a_scale_in_is_answered(monkeypatch):
    """While scaled in the controller decides the dump for a fault (csrc/controller caps_now_locked): its
    saves are no recovery at the smaller size, and are carried out."""
    from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in

    ran = []
    stage = Stage("record", lambda session, megatron, action: ran.append(action.name), on_training_thread=False)
    monkeypatch.setitem(FLOWS, "dump", {name: (stage,) for name in ("stop", "save_ckpt", "rename", "exit")})
    session, megatron = session_at(6), FakeMegatron()
    session.flow = "scale_in"
    session.scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    for name in ("stop", "save_ckpt", "rename", "exit"):
        run_action(session, megatron, RecoveryAction(name, "dump"))
    assert ran == ["stop", "save_ckpt", "rename", "exit"] and session.flow == "dump"


def test_a_scale_out_after_a_scale_in_is_answered_and_a_returned_process_starts_in_it(monkeypatch):
    from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in

    monkeypatch.setitem(FLOWS, "scale_out", {name: () for name in ("stop", "clean", "rebuild_group")})
    survivor, megatron = session_at(6), FakeMegatron()
    survivor.flow = "scale_in"
    survivor.scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    for name in ("stop", "clean", "rebuild_group"):
        run_action(survivor, megatron, RecoveryAction(name, "scale_out"))  # not refused as a later recovery
        assert survivor.flow == "scale_out"
    returned = session_at(None)  # its first action is REBUILD_GROUP
    run_action(returned, megatron, RecoveryAction("rebuild_group", "scale_out"))
    assert returned.flow == "scale_out"
