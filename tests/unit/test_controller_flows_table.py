"""The controller's flows as data (csrc/controller/flows.h), through a read-only view of their tables:
every step of online repair (retry), process replacement (recover) and the dump, and what each falls
back to. Written from the behaviour before the dump became a flow (issue 14); the flows seen from the
wire are in tests/integration/test_controller_*.py."""
import pytest

from mindio_adaptor import _native as nat


def act(action, failure, targets="flow", interruptible=True, skip_if_none=False, unless_stopped=False,
        names_failed=False):
    return {"op": "act", "action": action, "failure": failure, "targets": targets, "interruptible": interruptible,
            "skip_if_none": skip_if_none, "unless_stopped": unless_stopped, "names_failed": names_failed}


def op(name):
    return {"op": name}


RETRY_FAILS = " failed or a new fault arrived during repair"
RECOVER_FAILS = " failed or a new fault arrived during process replacement"


def test_retry_stops_cleans_repairs_rolls_back_and_resumes_or_dumps():
    f = nat.flow_table("retry")
    assert (f["strategy"], f["result"], f["replaces"], f["may_reload"]) == ("retry", "retry", False, True)
    assert f["fallback"] == "dump"
    assert f["steps"] == [
        op("begin"),
        act("stop", "stop" + RETRY_FAILS),
        op("report_stop_complete"),
        act("clean", "clean" + RETRY_FAILS),
        op("enter_repair"),
        act("repair", "repair" + RETRY_FAILS, skip_if_none=True),
        act("rollback", "rollback" + RETRY_FAILS),
        act("normal", "resuming failed"),
        op("finish"),
    ]


def test_hot_switch_stops_the_leaving_ranks_with_the_others_then_hands_them_over():
    f = nat.flow_table("hot_switch")
    assert (f["strategy"], f["result"], f["replaces"], f["hands_over"], f["may_reload"]) == \
        ("hot_switch", "hot_switch", True, True, False)
    assert f["fallback"] == "dump"
    during = " failed or a fault arrived during the hot switch"
    assert f["steps"] == [
        op("begin"),
        act("stop", "stop" + during),
        act("clean", "clean" + during),
        op("hand_over"),
        op("await_replacements"),
        op("enter_repair"),
        act("rebuild_group", "rebuilding the groups with the new processes failed or a fault arrived during the hot "
                             "switch"),
        act("repair", "repairing the new processes" + during),
        act("rollback", "rollback" + during),
        act("normal", "resuming failed"),
        op("finish"),
    ]
    assert not nat.flow_table("recover")["hands_over"]


def test_recover_waits_for_the_replacements_and_rebuilds_the_groups_or_dumps():
    f = nat.flow_table("recover")
    assert (f["strategy"], f["result"], f["replaces"], f["may_reload"]) == ("recover", "recover", True, False)
    assert f["fallback"] == "dump"
    assert f["steps"] == [
        op("begin"),
        act("stop", "stop" + RECOVER_FAILS),
        op("report_stop_complete"),
        act("clean", "clean" + RECOVER_FAILS),
        op("take_offline"),
        op("await_replacements"),
        op("enter_repair"),
        act("rebuild_group", "rebuilding the communication groups failed or a new fault arrived"),
        act("repair", "repairing the replacements failed or a new fault arrived"),
        act("rollback", "rollback" + RECOVER_FAILS),
        act("normal", "resuming failed"),
        op("finish"),
    ]


def test_dump_stops_unless_stopped_saves_on_the_savers_renames_on_one_and_exits():
    f = nat.flow_table("dump")
    assert (f["strategy"], f["result"], f["replaces"], f["may_reload"]) == ("dump", "dump", False, False)
    assert f["fallback"] == "exit"
    assert f["steps"] == [
        op("begin_dump"),
        # A rank that fails the STOP does not end the dump: the savers are picked from what is left.
        act("stop", "", interruptible=False, unless_stopped=True),
        op("pick_savers"),
        act("save_ckpt", "saving the checkpoint failed on ranks", targets="savers", interruptible=False,
            names_failed=True),
        act("rename", "renaming the checkpoint failed", targets="one_saver", interruptible=False),
        op("finish_by_exit"),
    ]


def test_scale_in_saves_like_the_dump_where_the_ranks_take_that_path_then_the_survivors_go_on():
    f = nat.flow_table("scale_in")
    assert (f["strategy"], f["result"], f["replaces"], f["may_reload"]) == ("scale_in", "scale_in", False, True)
    assert f["fallback"] == "exit"  # the dump, where written, is the resume point
    assert f["steps"] == [
        op("begin_scale_in"),
        act("stop", "", interruptible=False, unless_stopped=True),
        op("pick_savers"),
        act("save_ckpt", "saving the checkpoint to scale in from failed on ranks", targets="savers",
            interruptible=False, names_failed=True),
        act("rename", "renaming the checkpoint to scale in from failed", targets="one_saver", interruptible=False),
        op("enter_repair"),
        op("retire_lost"),
        act("rebuild_group", "rebuilding the groups among the survivors failed", interruptible=False),
        act("repair", "taking the repair step's state at the smaller data-parallel size failed", interruptible=False),
        act("rollback", "rollback after the scale-in failed", interruptible=False),
        act("normal", "resuming after the scale-in failed", interruptible=False),
        op("finish"),
    ]


def test_scale_out_saves_on_the_survivors_then_every_rank_reloads_at_the_original_size():
    f = nat.flow_table("scale_out")
    # replaces: the returned ranks sit out until the repair, as a process replacement's
    assert (f["strategy"], f["result"], f["replaces"], f["may_reload"]) == ("scale_out", "scale_out", True, True)
    assert f["fallback"] == "exit"  # a failure once the survivors stopped ends the job
    assert f["steps"] == [
        op("begin"),
        act("stop", "stopping the survivors for the scale-out failed or a new fault arrived"),
        act("clean", "rebuilding the survivors' groups for the scale-out failed or a new fault arrived"),
        act("save_ckpt", "saving the checkpoint to scale out from failed on ranks", names_failed=True),
        op("enter_repair"),
        act("rebuild_group", "rebuilding the groups at the original size failed or a new fault arrived"),
        act("repair", "loading the checkpoint at the original data-parallel size failed"),
        act("rollback", "rollback after the scale-out failed"),
        act("normal", "resuming after the scale-out failed"),
        op("return_retired"),
        op("finish"),
    ]


def test_every_flow_falls_back_towards_the_exit():
    seen, flow = [], "retry"
    while flow != "exit":
        seen.append(flow)
        flow = nat.flow_table(flow)["fallback"]
    assert seen == ["retry", "dump"]
    assert nat.flow_table("recover")["fallback"] == "dump"


def test_only_the_resizes_take_the_layout_from_the_ranks_again():
    """Their REBUILD_GROUP changes the data-parallel size: the controller forgets the layout and takes the one
    every rank reports while it rebuilds (tests/integration/test_controller_arf.py, the relayout tests)."""
    relayouts = {name: nat.flow_table(name)["relayouts"] for name in ("retry", "recover", "dump", "scale_in",
                                                                      "scale_out")}
    assert relayouts == {"retry": False, "recover": False, "dump": False, "scale_in": True, "scale_out": True}


@pytest.mark.parametrize("name", ["exit", "none"])
def test_exit_and_none_have_no_flow(name):
    with pytest.raises(ValueError, match="no recovery flow"):
        nat.flow_table(name)
