"""The "client" fault-handling mode (recovery/fault_handling): selecting it, the helpers a reference
client's handlers call (recovery/client_actions: what they turn the handlers' arguments into, and the
clear errors for bad ones), and train() leaving a training exception to the client (patches/client_loop)."""
import pytest

from mindio_adaptor.core.detection import faults
from mindio_adaptor.core.detection.enums import RepairType, ReportState
from mindio_adaptor.patches import client_loop, registry
from mindio_adaptor.recovery import client_actions, fault_handling, flows
from mindio_adaptor.recovery.session import SESSION


@pytest.fixture
def client_mode():
    fault_handling.select(fault_handling.CLIENT)
    yield
    fault_handling.select(fault_handling.ADAPTOR)


@pytest.fixture
def ran(monkeypatch, client_mode):
    """The RecoveryActions the helpers hand to the flow table, under the strategy "retry"."""
    actions = []
    monkeypatch.setattr(flows, "run_action", lambda session, megatron, action: actions.append(action) or 0)
    monkeypatch.setattr(client_actions, "_strategy", lambda: "retry")
    return actions


def test_the_adaptor_handles_faults_unless_the_client_is_chosen():
    assert fault_handling.mode() == "adaptor" and not fault_handling.client_handles_faults()
    with pytest.raises(ValueError, match=r"patch_all\(fault_handling='mindspeed'\): expected one of 'adaptor', 'client'"):
        fault_handling.select("mindspeed")
    assert fault_handling.mode() == "adaptor"


def test_the_mode_changes_until_megatron_initialises_then_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_active", True)
    registry.patch_all()  # the same mode: nothing to do
    registry.patch_all(fault_handling="client")  # a warm worker patched first, then the script chose
    assert fault_handling.mode() == "client"
    fault_handling.put_in_force()
    try:
        with pytest.raises(ValueError, match=r"Megatron already initialised with fault_handling='client'"):
            registry.patch_all(fault_handling="adaptor")
        assert fault_handling.mode() == "client"
    finally:
        fault_handling.reset()


def test_the_helpers_refuse_to_run_while_the_adaptor_handles_faults():
    for call in (client_actions.stop, client_actions.clean, lambda: client_actions.rollback(3),
                 client_actions.replica_info, lambda: client_actions.on_update(print, print)):
        with pytest.raises(client_actions.NotInClientMode, match=r'patch_all\(fault_handling="client"\)'):
            call()


def test_a_repair_call_becomes_the_flows_repair_with_the_pairs_of_the_call(ran):
    info = {"type": [0, 0], "repair_type": int(RepairType.SEND), "src": [3, 3], "dst": [1, 5], "rank_list": [1, 3, 5]}
    assert client_actions.repair(4, info) == 0
    (action,) = ran
    assert (action.name, action.strategy, action.step, action.error_ranks) == ("repair", "retry", 4, (1, 5))
    assert action.repair.pairs() == [(3, 1), (3, 5)] and action.repair.optimizer_types == (0, 0)
    assert action.repair.repair_type == RepairType.SEND and action.repair.rank_list == (1, 3, 5)
    client_actions.repair(4, {**info, "type": 1})  # the older form: one optimizer type for every pair
    assert ran[1].repair.optimizer_types == (1, 1)


@pytest.mark.parametrize("info, message", [
    ({"type": [0], "src": [3], "dst": [1]}, r"repair_info lacks \['repair_type'\]"),
    ({"type": [0], "repair_type": 1, "src": [3, 2], "dst": [1]}, "src, dst and type must be parallel lists"),
    ([3, 1], r"repair_info lacks \['a dict'\]"),
])
def test_a_bad_repair_info_is_named(ran, info, message):
    with pytest.raises(ValueError, match=message):
        client_actions.repair(4, info)
    assert not ran


def test_save_and_rename_calls_become_the_dump_flows_actions(ran):
    client_actions.save_ckpt(4, [{"type": 0, "ranks": [0, 1]}])
    client_actions.rename(4)
    assert [(a.name, a.step) for a in ran] == [("save_ckpt", 4), ("rename", 4)]
    assert [(s.optimizer_type, s.ranks) for s in ran[0].saves] == [(0, (0, 1))]
    with pytest.raises(ValueError, match=r"save_info must be a list of \{'type': int, 'ranks': \[int\]\}"):
        client_actions.save_ckpt(4, [{"ranks": [0]}])
    with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
        client_actions.rename(-1)


def raising(exc):
    def train(*args, **kwargs):
        raise exc
    return train


def test_a_stopped_ranks_exception_leaves_train_as_force_stop(client_mode):
    try:
        SESSION.thread.stop_requested.set()  # set by the STOP stage; train() clears it when entered
        with pytest.raises(RuntimeError, match="lost") as no_stop:
            client_loop.train(raising(RuntimeError("connection lost")), (), {})
        assert SESSION.thread.parked.is_set() and "FORCE STOP" not in str(no_stop.value)

        def stopped_then_raising(*args, **kwargs):
            SESSION.thread.stop_requested.set()
            raise RuntimeError("Connection closed by peer")

        with pytest.raises(RuntimeError, match=r"^FORCE STOP: rank stopped by the controller \(RuntimeError: "
                                               r"Connection closed by peer\)") as stopped:
            client_loop.train(stopped_then_raising, (), {})
        assert faults.report_state_of(stopped.value) == ReportState.NORMAL  # what tft_exception_handler reports
        assert SESSION.thread.parked.is_set()
    finally:
        SESSION.thread.reset()
