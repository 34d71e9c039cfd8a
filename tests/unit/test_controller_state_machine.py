"""The controller's transition table and its decision per fault type."""
import pytest

from mindio_adaptor import _native as nat

MAIN_PATH = ["INIT", "NORMAL", "ABNORMAL", "ENV_CLEAR", "REPAIR", "NORMAL"]
DUMP_FROM = ["NORMAL", "PAUSE", "ABNORMAL", "ENV_CLEAR", "REPAIR"]


def test_states_are_the_reference_names():
    assert nat.STATES == ["INIT", "NORMAL", "PAUSE", "STEP_FINISH", "MIGRATION", "ABNORMAL", "ENV_CLEAR",
                          "REPAIR", "DG_REPAIR", "DOWNGRADE", "UPGRADE", "DUMP", "EXIT", "FINAL"]


def test_main_path_is_allowed():
    for a, b in zip(MAIN_PATH, MAIN_PATH[1:]):
        assert nat.transition_allowed(a, b), (a, b)


@pytest.mark.parametrize("state", DUMP_FROM)
def test_any_failure_can_dump_then_exit(state):
    assert nat.transition_allowed(state, "DUMP")
    assert nat.transition_allowed("DUMP", "EXIT")
    assert nat.transition_allowed(state, "EXIT")


def test_a_hot_switch_goes_from_the_pause_to_the_hand_over():
    path = ["NORMAL", "PAUSE", "ENV_CLEAR", "REPAIR", "NORMAL"]
    for a, b in zip(path, path[1:]):
        assert nat.transition_allowed(a, b), (a, b)


@pytest.mark.parametrize("a,b", [
    ("NORMAL", "REPAIR"), ("NORMAL", "ENV_CLEAR"), ("ABNORMAL", "REPAIR"), ("ABNORMAL", "NORMAL"),
    ("ENV_CLEAR", "NORMAL"), ("DUMP", "NORMAL"), ("DUMP", "REPAIR"), ("EXIT", "NORMAL"), ("EXIT", "DUMP"),
    ("FINAL", "NORMAL"), ("FINAL", "FINAL"), ("NORMAL", "NORMAL"), ("NORMAL", "DOWNGRADE"),
])
def test_illegal_edges_are_refused(a, b):
    assert not nat.transition_allowed(a, b)


def test_table_is_exactly_the_listed_edges_plus_shutdown():
    table = set(nat.transition_table())
    for a in nat.STATES:
        for b in nat.STATES:
            assert nat.transition_allowed(a, b) == ((a, b) in table)
    assert all((s, "FINAL") in table for s in nat.STATES if s != "FINAL")
    # Elastic-training states are named but unreachable until elastic training exists.
    for unreachable in ["STEP_FINISH", "MIGRATION", "DG_REPAIR", "DOWNGRADE", "UPGRADE"]:
        assert not any(b == unreachable for _, b in table)


def test_unknown_state_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown controller state 'NORMALL'"):
        nat.transition_allowed("NORMALL", "EXIT")


@pytest.mark.parametrize("report,kind", [(0, None), (1, "communication"), (2, "memory"), (3, "memory"),
                                         (4, "communication"), (5, None), (6, None), (7, None),
                                         (8, "unknown")])
def test_report_states_map_to_fault_kinds(report, kind):
    assert nat.fault_kind_of_report(report) == kind


def decide(kinds, retry=True, recover=False, during_repair=False, repairable=True, dump_possible=True,
           reload_possible=False):
    return nat.decide(kinds, retry, recover, during_repair, repairable, dump_possible, reload_possible)


@pytest.mark.parametrize("kinds,kwargs,expected", [
    (["memory"], {}, "retry"),
    (["communication"], {}, "retry"),
    (["memory", "communication"], {}, "retry"),
    (["memory"], {"retry": False}, "dump"),
    (["memory"], {"repairable": False}, "dump"),
    (["memory"], {"repairable": False, "dump_possible": False}, "exit"),
    (["node"], {}, "dump"),
    (["node"], {"recover": True}, "recover"),
    (["node"], {"recover": True, "repairable": False}, "dump"),
    (["node", "memory"], {"recover": True}, "recover"),
    (["node"], {"dump_possible": False}, "exit"),
    (["unknown"], {}, "dump"),
    (["unknown", "memory"], {}, "dump"),
    (["unknown"], {"dump_possible": False}, "exit"),
    (["memory"], {"during_repair": True}, "dump"),
    (["node"], {"during_repair": True, "recover": True}, "dump"),
    (["memory"], {"during_repair": True, "dump_possible": False}, "exit"),
    # No replica to repair from, but a periodic checkpoint every rank can reload: retry (LOAD_CKPT).
    (["memory"], {"repairable": False, "dump_possible": False, "reload_possible": True}, "retry"),
    (["communication"], {"repairable": False, "dump_possible": False, "reload_possible": True}, "retry"),
    (["memory"], {"repairable": False, "reload_possible": True, "retry": False}, "dump"),
    (["memory"], {"repairable": False, "reload_possible": True, "during_repair": True}, "dump"),
    (["unknown"], {"repairable": False, "dump_possible": False, "reload_possible": True}, "exit"),
    (["node"], {"repairable": False, "dump_possible": False, "reload_possible": True, "recover": True}, "exit"),
])
def test_decision_per_fault_type(kinds, kwargs, expected):
    assert decide(kinds, **kwargs) == expected


# Process replacement (ARF) on and off: a node error (process dead, heartbeat lost, process-type fault)
# is replaced when ARF is enabled and its shard has a live replica, else dumped (or exit without a
# complete replica); memory and communication errors are repaired online either way.
@pytest.mark.parametrize("kinds,kwargs,with_arf,without_arf", [
    (["node"], {}, "recover", "dump"),
    (["node"], {"retry": False}, "recover", "dump"),
    (["node", "memory"], {}, "recover", "dump"),
    (["node", "communication"], {}, "recover", "dump"),
    (["node", "unknown"], {}, "recover", "dump"),
    (["node"], {"repairable": False}, "dump", "dump"),
    (["node"], {"repairable": False, "dump_possible": False}, "exit", "exit"),
    (["node"], {"during_repair": True}, "dump", "dump"),
    (["node"], {"during_repair": True, "dump_possible": False}, "exit", "exit"),
    (["memory"], {}, "retry", "retry"),
    (["memory"], {"retry": False}, "dump", "dump"),
    (["communication"], {}, "retry", "retry"),
    (["unknown"], {}, "dump", "dump"),
    ([], {}, "dump", "dump"),
])
def test_decision_with_and_without_arf(kinds, kwargs, with_arf, without_arf):
    assert decide(kinds, recover=True, **kwargs) == with_arf
    assert decide(kinds, recover=False, **kwargs) == without_arf
