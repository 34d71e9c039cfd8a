"""patches/recovery: the one table of which stages each action of each flow runs, and how an action
reaches its stages (on the parked training thread, or on the processor's thread)."""
import threading

import pytest

from recovery_fakes import FakeMegatron, session_at
from mindio_adaptor.core.enums import RepairType
from mindio_adaptor.patches import recovery
from mindio_adaptor.patches.recovery import FLOWS, NoSuchStep, flow_of, run_action, stages_of
from mindio_adaptor.patches.stages.stage import RecoveryAction, Stage

EVERY_FLOW = {
    "retry": {"stop": ["stop"], "clean": ["repair fault point", "rebuild groups"], "repair": ["repair from peer"],
              "rollback": ["roll back"], "exit": ["end even if hung"]},
    "reload": {"stop": ["stop"], "clean": ["repair fault point", "rebuild groups"], "repair": ["reload checkpoint"],
               "rollback": ["roll back"], "exit": ["end even if hung"]},
    "recover": {"stop": ["stop"], "clean": ["repair fault point", "drop gradients"], "rebuild_group": ["rebuild groups"],
                "repair": ["repair from peer"], "rollback": ["roll back"], "exit": ["end even if hung"]},
    "dump": {"stop": ["stop"], "save_ckpt": ["save dump"], "rename": ["publish dump"], "exit": ["end even if hung"]},
    "exit": {"stop": ["stop"], "exit": ["end even if hung"]},
    "none": {"stop": ["stop"], "exit": ["end even if hung"]},
}


def repair_info(repair_type):
    return {"type": 0, "repair_type": repair_type, "src": [0], "dst": [2], "rank_list": [0, 2]}


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


class FakeProcessor:
    """The reference face's registration calls, and the decision the processor recorded."""

    def __init__(self, strategy):
        self.handlers, self.strategy = {}, strategy

    def __getattr__(self, name):
        if name.startswith("tft_register_") and name.endswith("_handler"):
            return lambda fn: self.handlers.__setitem__(name[len("tft_register_"):-len("_handler")], fn)
        raise AttributeError(name)

    def tft_get_repair_type(self):
        return self.strategy


def test_each_handler_becomes_its_action(monkeypatch):
    actions = []
    monkeypatch.setattr(recovery, "run_action", lambda session, megatron, action: actions.append(action) or 0)
    processor = FakeProcessor("recover")
    recovery.register_handlers(session_at(3), processor, FakeMegatron())
    assert sorted(processor.handlers) == ["clean", "exit", "rebuild_group", "rename", "repair", "rollback",
                                          "save_ckpt", "stop"]
    h = processor.handlers
    info = repair_info(RepairType.RECV_REPAIR)
    results = [h["stop"](None, None), h["clean"](True, None, None), h["rebuild_group"]([2], None, None),
               h["repair"](3, True, [2], info, None, None), h["rollback"](3, None, None),
               h["save_ckpt"](3, [{"type": 0, "ranks": [0, 1]}], None, None), h["rename"](3, None), h["exit"](None)]
    assert results == [0] * 8
    assert actions == [RecoveryAction("stop", "recover"), RecoveryAction("clean", "recover"),
                       RecoveryAction("rebuild_group", "recover", error_ranks=(2,)),
                       RecoveryAction("repair", "recover", step=3, repair=info, error_ranks=(2,)),
                       RecoveryAction("rollback", "recover", step=3),
                       RecoveryAction("save_ckpt", "recover", step=3, save_info=[{"type": 0, "ranks": [0, 1]}]),
                       RecoveryAction("rename", "recover", step=3), RecoveryAction("exit", "recover")]


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
