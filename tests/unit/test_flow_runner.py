"""The controller's flow runner (csrc/controller/flow_runner.h) on its own: each flow of flows.cpp run over a
scripted host (`_native.run_flow_script`), which records every call the runner makes of it and fails where a
test says. What is checked here is the runner's part: the order of the steps, each action's targets, the
fallback of a failed step, the relayout bracket and the leavers of a scale-in or a partial scale-out, and the lease
ending a flow."""
from mindio_adaptor import _native as nat


def after(calls, call):
    return calls[calls.index(call) + 1:]


def test_an_online_repair_runs_its_steps_in_order_on_the_live_ranks():
    calls = nat.run_flow_script("retry", repaired={3})
    assert calls == ["begin", "act stop [0,1,2,3]", "report report_stop_complete", "act clean [0,1,2,3]",
                     "enter_repair", "act repair [3]", "act rollback [0,1,2,3]", "act normal [0,1,2,3]",
                     "running [0,1,2,3]", "finish"], calls


def test_a_repair_nobody_needs_is_not_sent_and_a_reload_goes_to_every_rank():
    assert "act repair" not in " ".join(nat.run_flow_script("retry")), "nothing to repair, yet a REPAIR was sent"
    calls = nat.run_flow_script("retry", repaired={3}, reload_step=4)
    assert "act repair [0,1,2,3] load_ckpt" in calls, calls


def test_a_replacement_sits_out_until_it_joins_then_every_action_names_it():
    calls = nat.run_flow_script("recover", replace={3})
    assert calls[:6] == ["begin", "act stop [0,1,2]", "report report_stop_complete", "act clean [0,1,2]",
                         "take_offline [3]", "await_replacements [3]"], calls
    assert after(calls, "enter_repair") == ["act rebuild_group [0,1,2,3]", "act repair [3]", "act rollback [0,1,2,3]",
                                            "act normal [0,1,2,3]", "running [0,1,2,3]", "finish"], calls


def test_a_replacement_that_never_comes_falls_back_to_the_dump_without_elastic_training():
    calls = nat.run_flow_script("recover", replace={3}, fail={"await_replacements": "timed out"})
    rest = after(calls, "await_replacements [3]")
    assert rest[0] == "begin_dump: timed out", calls
    # The survivors were stopped by the recovery: the dump does not stop them again.
    assert rest[1:] == ["pick_savers", "act save_ckpt [0]", "act rename [0]", "exit_all 0: dump of step 4 complete"]


def test_with_elastic_training_it_scales_in_instead_and_the_lost_ranks_retire():
    calls = nat.run_flow_script("recover", elastic=True, replace={3}, fail={"await_replacements": "timed out"})
    rest = after(calls, "await_replacements [3]")
    assert rest == ["begin_scale_in: timed out", "pick_savers", "act save_ckpt [0]", "act rename [0]", "enter_repair",
                    "retire [3]", "begin_relayout", "act rebuild_group [0,1,2]", "end_relayout [0,1,2] ok",
                    "act repair [0,1,2] load_ckpt", "act rollback [0,1,2]", "act normal [0,1,2]", "running [0,1,2]",
                    "finish"], calls


def test_elastic_training_changes_no_other_fallback():
    calls = nat.run_flow_script("recover", elastic=True, replace={3}, fail={"rebuild_group": ""})
    rest = after(calls, "act rebuild_group [0,1,2,3]")
    assert rest[0] == "begin_dump: rebuilding the communication groups failed or a new fault arrived", calls


def test_a_scale_in_leaver_retires_with_its_slice_reports_no_layout_and_is_skipped_after():
    calls = nat.run_flow_script("scale_in", replace={3}, leavers={2})
    rest = after(calls, "act rebuild_group [0,1,2]")
    assert rest == ["end_relayout [0,1] ok", "retire [2] with their slices", "act repair [0,1] load_ckpt",
                    "act rollback [0,1]", "act normal [0,1]", "running [0,1]", "finish"], calls


def test_a_leaver_outside_a_scale_in_fails_the_action_and_the_flow_falls_back():
    calls = nat.run_flow_script("recover", replace={3}, leavers={2})
    rest = after(calls, "act rebuild_group [0,1,2,3]")
    assert rest[0] == ("begin_dump: ranks [2] replied to REBUILD_GROUP that they leave the job, which only a "
                       "scale-in or a partial scale-out allows"), calls
    assert not any(call.startswith("retire") for call in calls), calls


def test_a_dump_without_savers_ends_every_rank_with_499_naming_why():
    calls = nat.run_flow_script("dump", fail={"pick_savers": "no complete replica"})
    assert calls == ["begin_dump: ", "act stop [0,1,2,3]", "pick_savers", "exit_all 499: no complete replica"], calls


def test_a_failed_save_names_the_ranks_that_failed():
    calls = nat.run_flow_script("dump", fail={"save_ckpt": ""})
    assert calls[-1] == "exit_all 499: saving the checkpoint failed on ranks [0]", calls


def test_a_lost_lease_ends_the_flow_before_its_next_step_with_no_fallback():
    calls = nat.run_flow_script("retry", repaired={3}, lease_checks=3, fail={"clean": ""})
    assert calls == ["begin", "act stop [0,1,2,3]", "report report_stop_complete", "lease lost"], calls
    # Held by the lease between a failed step and its fallback as well: the fallback acts too.
    calls = nat.run_flow_script("retry", lease_checks=4, fail={"clean": ""})
    assert calls[-2:] == ["act clean [0,1,2,3]", "lease lost"], calls


def test_a_hot_switch_hands_its_ranks_over_then_takes_their_new_processes_in():
    calls = nat.run_flow_script("hot_switch", replace={1})
    assert calls[:4] == ["begin", "act stop [0,1,2,3]", "act clean [0,1,2,3]", "hand_over"], calls
    assert "act rebuild_group [0,1,2,3]" in calls and "act repair [1]" in calls, calls


def test_a_scale_out_returns_the_retired_ranks_and_reloads_the_saved_step():
    calls = nat.run_flow_script("scale_out", replace={2, 3}, live={0, 1}, reload_step=4)
    assert "return_retired [2,3]" in calls, calls
    assert calls.index("begin_relayout") < calls.index("act rebuild_group [0,1,2,3]") < \
        calls.index("end_relayout [0,1,2,3] ok"), calls
    assert [call for call in calls if call.startswith("act repair")] == ["act repair [0,1,2,3] load_ckpt"], calls


def test_a_partial_scale_out_names_the_absent_ranks_and_a_returned_leaver_stays_retired():
    # dp1 (rank 0) after two scale-ins; ranks 1 and 2 returned and are ready, rank 3 did not: rank 2's slice
    # has rank 3 in it (the ranks' plan), so rank 2 leaves again and only rank 1 joins
    calls = nat.run_flow_script("scale_out", replace={1, 2}, absent={3}, live={0}, leavers={2}, reload_step=4)
    assert "act rebuild_group [0,1,2] absent [3]" in calls, calls
    rest = after(calls, "act rebuild_group [0,1,2] absent [3]")
    assert rest[:2] == ["end_relayout [0,1] ok", "retire [2]"], calls
    assert "return_retired [1]" in calls and "act rollback [0,1]" in calls, calls


def test_a_leaver_in_a_whole_scale_out_or_a_survivor_leaving_a_partial_one_fails_the_action():
    for absent, leavers in (set(), {2}), ({3}, {0}):
        calls = nat.run_flow_script("scale_out", replace={1, 2}, absent=absent, live={0}, leavers=leavers,
                                    reload_step=4)
        failed = [call for call in calls if "replied to REBUILD_GROUP" in call]
        leaver, = leavers
        assert failed and failed[0].endswith(f"ranks [{leaver}] replied to REBUILD_GROUP that they leave the job, "
                                             "which in a scale-out only a returned rank of a partial one may"), calls
        assert not any(call.startswith("retire") for call in calls), calls
