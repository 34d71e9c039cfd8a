"""What a backup controller that took over settles (controller/takeover.h), through the bindings: the
ranks that never registered with it, and whether a recovery the old controller left is restarted from
the start or ends in a dump."""
import pytest

from mindio_adaptor import _native as nat


def test_nothing_in_progress_and_everyone_back_settles_nothing():
    plan = nat.plan_takeover(["", "", "", ""])
    assert plan == {"missing": set(), "interrupted": {}, "resume": "nothing", "why": ""}


def test_ranks_that_did_not_register_are_missing_whatever_the_rest_did():
    plan = nat.plan_takeover(["", None, "", None])
    assert plan["missing"] == {1, 3}
    assert plan["resume"] == "nothing"  # their death is an ordinary fault, handled as such


@pytest.mark.parametrize("action", ["prelock", "stop", "clean"])
def test_a_recovery_interrupted_up_to_clean_with_a_known_fault_restarts(action):
    plan = nat.plan_takeover([action, action, "", action], faulty={1})
    assert plan["resume"] == "restart"
    assert plan["interrupted"] == {0: action, 1: action, 3: action}
    assert plan["why"] == (f"a recovery was in progress at the takeover (ranks [0,1,3] at {action}): no rank was "
                           f"past clean; the faults of ranks [1] are handled again from the start")


def test_a_missing_rank_is_a_known_fault_to_restart_from():
    plan = nat.plan_takeover(["stop", None, "clean", "stop"])
    assert plan["resume"] == "restart" and plan["missing"] == {1}
    assert plan["why"].endswith("the faults of ranks [1] are handled again from the start")
    assert "ranks [2] at clean, ranks [0,3] at stop" in plan["why"]


def test_a_recovery_with_no_known_fault_dumps():
    plan = nat.plan_takeover(["stop", "stop", "stop", "stop"])
    assert plan["resume"] == "dump"
    assert plan["why"].endswith("no rank reported its fault again and none is missing, nothing to restart from: dump")


@pytest.mark.parametrize("action", ["rebuild_group", "repair", "rollback", "save_ckpt", "rename"])
def test_a_recovery_past_clean_dumps_even_with_its_fault_known(action):
    plan = nat.plan_takeover(["clean", action, "clean", action], faulty={1})
    assert plan["resume"] == "dump"
    assert plan["why"].endswith("ranks [1,3] were past clean, where state may be half repaired; restarting is not "
                                "safe: dump")


def test_an_unknown_action_name_is_refused():
    with pytest.raises(ValueError, match="unknown action 'teleport'"):
        nat.plan_takeover(["teleport"])
