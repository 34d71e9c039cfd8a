"""The controller's pure planner (csrc/controller/planner.h) case by case, through the bindings: from a
snapshot of the ranks, the replica layout, the capabilities and the faults to the plan. The expected
plans are the controller's decisions before the planner was extracted (issue 14); the same cases,
seen from the wire, are in tests/integration/test_controller_decisions.py."""
import pytest

from mindio_adaptor import _native as nat
from mindio_adaptor.core.detection.enums import RepairType

DP4_R2 = [(0, 2, [0, 1, 2, 3])]  # shard 0 held by ranks 0 and 2, shard 1 by ranks 1 and 3
DP8_R2 = [(0, 2, list(range(8)))]  # shard j held by ranks j and j + 4
AT_5 = [5, 5, 5, 5]
RT = nat.REPAIR_TYPES


def test_repair_types_keep_the_wire_values_of_the_python_enum():
    assert RT == {m.name: m.value for m in RepairType if not m.name.startswith("RT_")}


# ---- retry: online repair --------------------------------------------------------------------

def test_memory_error_with_a_healthy_peer_is_retried():
    p = nat.plan_fault(AT_5, {1: "memory"}, DP4_R2)
    assert p["strategy"] == "retry"
    assert (p["repair_step"], p["repair_set"], p["is_uce"], p["unavailable"]) == (5, {1}, True, {1})
    assert p["why"] == "faults 1:memory repair_step=5 repair_set=[1] repairable=1 dump_possible=1"
    assert p["reload_step"] == -1 and p["savers"] == {0: [0, 3]}
    assert p["cluster_offer"] == ["retry", "dump", "exit"]


def test_repair_pairs_name_the_source_and_the_receivers_repair_type():
    r = nat.plan_repair(AT_5, {1: "memory"}, DP4_R2)
    assert r["by_type"] == [(0, [3], [1], [1, 3])]
    assert r["by_rank"] == {1: [(0, RT["UCE_HIGHLEVEL"], [3], [1], [1, 3])], 3: [(0, RT["SEND"], [3], [1], [1, 3])]}


def test_a_clean_result_2_makes_the_receiver_uce_lowlevel():
    r = nat.plan_repair(AT_5, {1: "memory"}, DP4_R2, clean_results={1: 2, 3: 0})
    assert r["by_rank"][1][0][1] == RT["UCE_LOWLEVEL"]
    assert r["by_rank"][3][0][1] == RT["SEND"]


def test_communication_error_is_retried_with_nothing_to_repair():
    p = nat.plan_fault(AT_5, {2: "communication"}, DP4_R2)
    assert (p["strategy"], p["repair_set"], p["is_uce"], p["repairable"]) == ("retry", set(), False, True)
    assert nat.plan_repair(AT_5, {2: "communication"}, DP4_R2)["by_rank"] == {}


def test_retry_turned_off_dumps_a_memory_error_without_the_faulty_rank():
    p = nat.plan_fault(AT_5, {0: "memory"}, DP4_R2, retry=False)
    assert p["strategy"] == "dump" and p["savers"] == {0: [1, 2]}
    assert p["cluster_offer"] == ["dump", "exit"]


def test_repair_pairs_of_several_optimizer_types():
    layout = [(0, 2, [0, 1, 2, 3]), (1, 2, [0, 2, 1, 3])]
    r = nat.plan_repair(AT_5, {1: "memory"}, layout)
    # Type 1 lists [0,2,1,3]: rank 1 (position 2) holds shard 0 with rank 0.
    assert r["by_type"] == [(0, [3], [1], [1, 3]), (1, [0], [1], [0, 1])]
    assert r["by_rank"][1] == [(0, RT["UCE_HIGHLEVEL"], [3], [1], [1, 3]), (1, RT["UCE_HIGHLEVEL"], [0], [1], [0, 1])]
    assert r["by_rank"][0] == [(1, RT["SEND"], [0], [1], [0, 1])]


# ---- laggards ---------------------------------------------------------------------------------

def test_a_rank_mid_update_is_waited_for_by_the_prelock():
    ranks = [5, 5, {"step": 4, "data": "updating"}, 5]
    p = nat.plan_prelock(ranks, {1}, DP4_R2)
    assert (p["step"], p["level"], p["blocked"], p["laggards"]) == (5, False, set(), {2})


def test_nobody_to_wait_for_when_every_healthy_rank_completed_the_step():
    p = nat.plan_prelock([5, {"step": 4, "data": "updating"}, 5, 5], {1}, DP4_R2)
    assert (p["step"], p["level"], p["laggards"]) == (5, True, set())


def test_a_rank_at_the_step_but_mid_update_makes_the_prelock_wait_without_being_a_laggard():
    p = nat.plan_prelock([5, 5, {"step": 5, "data": "updating"}, 5], {1}, DP4_R2)
    assert (p["level"], p["laggards"]) == (False, set())


def test_laggards_on_a_later_snapshot_leave_out_ranks_caught_up_dead_or_newly_faulty():
    live, blocked = {0, 1, 2, 3, 4, 5}, set()
    later = [5, 5, 4, {"step": 4, "dead": True}, 4, {"step": 4, "excluded": True}]
    assert nat.prelock_laggards(later, live, 5, blocked, {1}) == {2, 4}
    assert nat.prelock_laggards(later, live, 5, blocked, {1, 4}) == {2}
    assert nat.prelock_laggards(later, live, 5, {2}, {1}) == {4}


def test_update_peers_of_a_faulty_rank_behind_the_step_are_not_waited_for():
    # Ranks 0 and 1 update together (block 0); rank 1 failed before completing step 5.
    p = nat.plan_prelock([4, 4, 5, 5], {1}, DP4_R2)
    assert (p["step"], p["blocked"], p["level"], p["laggards"]) == (5, {0}, True, set())


def test_a_faulty_rank_at_the_step_blocks_nobody():
    assert nat.plan_prelock([4, 5, 5, 5], {1}, DP4_R2)["blocked"] == set()


def test_laggards_after_the_wait_are_repaired_like_corrupted_ranks():
    p = nat.plan_fault([5, 5, {"step": 4, "data": "updating"}, 5], {1: "memory"}, DP4_R2, lock_step=5)
    assert (p["not_ready"], p["repair_set"], p["strategy"]) == ({2}, {1, 2}, "retry")
    r = nat.plan_repair([5, 5, {"step": 4, "data": "updating"}, 5], {1: "memory"}, DP4_R2, lock_step=5)
    assert r["by_type"] == [(0, [3, 0], [1, 2], [0, 1, 2, 3])]
    assert r["by_rank"][2] == [(0, RT["UCE_HIGHLEVEL"], [3, 0], [1, 2], [0, 1, 2, 3])]


def test_the_lock_step_is_the_repair_step_even_when_every_rank_is_behind_it():
    p = nat.plan_fault([4, 4, 4, 4], {1: "communication"}, DP4_R2, lock_step=5)
    assert (p["repair_step"], p["not_ready"]) == (5, {0, 1, 2, 3})
    assert (p["repairable"], p["dump_possible"], p["strategy"]) == (False, False, "exit")


def test_without_a_lock_step_the_repair_step_is_the_highest_live_step():
    p = nat.plan_fault([5, 6, {"step": 9, "dead": True}, 6], {1: "memory"}, DP4_R2)
    assert (p["repair_step"], p["not_ready"], p["dead"]) == (6, {0}, {2})


# ---- no complete replica: reload or exit -------------------------------------------------------

def test_no_complete_replica_and_no_checkpoint_exits_naming_the_missing_shard():
    p = nat.plan_fault(AT_5, {1: "memory", 3: "memory"}, DP4_R2)
    assert (p["strategy"], p["repairable"], p["dump_possible"], p["reload_possible"]) == ("exit", False, False, False)
    assert p["missing"] == [(0, 0, 1)]
    why = "faults 1:memory 3:memory repair_step=5 repair_set=[1,3] repairable=0 dump_possible=0 reload_step=-1"
    assert p["why"] == why
    assert p["exit_reason"] == why + ("; dump impossible, no complete replica: type 0 group 0 shard 1 "
                                      "(holders [1,3] all dead, faulty or behind);")
    assert p["cluster_offer"] == ["exit"]


def test_no_complete_replica_reloads_the_checkpoint_every_rank_saved():
    ranks = [{"step": 5, "ckpt_step": 4}] * 4
    p = nat.plan_fault(ranks, {1: "memory", 3: "memory"}, DP4_R2)
    assert (p["strategy"], p["reload_step"], p["reloadable_step"]) == ("retry", 4, 4)
    assert p["why"].endswith("repairable=0 dump_possible=0 reload_step=4")
    assert nat.reload_info({0, 1, 2, 3}) == (0, RT["LOAD_CKPT"], [], [], [0, 1, 2, 3])


def test_a_repairable_fault_keeps_the_reload_step_unset_even_with_a_checkpoint():
    p = nat.plan_fault([{"step": 5, "ckpt_step": 4}] * 4, {1: "memory"}, DP4_R2)
    assert (p["reload_step"], p["reloadable_step"], p["reload_possible"]) == (-1, 4, True)


@pytest.mark.parametrize("ranks,why", [
    ([{"step": 5, "ckpt_step": c} for c in (4, 4, 4, 2)], "different checkpoints"),
    ([{"step": 5, "ckpt_step": c} for c in (4, 4, 4, -1)], "a rank saved none"),
    ([{"step": 3, "ckpt_step": 4}] * 4, "a checkpoint past the repair step"),
    ([{"step": 5, "ckpt_step": 4}] * 3 + [{"step": 5, "ckpt_step": 4, "dead": True}], "a dead rank"),
    ([{"step": 5, "ckpt_step": 4}] * 3 + [{"registered": False}], "a rank never registered"),
])
def test_no_reload_with(ranks, why):
    p = nat.plan_fault(ranks, {1: "memory", 3: "memory"}, DP4_R2)
    assert p["reloadable_step"] == -1, why


def test_no_layout_means_nothing_repairable_and_no_dump():
    p = nat.plan_fault([5, 5], {1: "memory"})
    assert (p["strategy"], p["repairable"], p["dump_possible"], p["missing"]) == ("exit", False, False, [])
    assert p["exit_reason"].endswith("reload_step=-1; dump impossible, no complete replica:")


def test_no_layout_reloads_a_common_checkpoint():
    p = nat.plan_fault([{"step": 5, "ckpt_step": 5}] * 2, {1: "memory"})
    assert (p["strategy"], p["reload_step"]) == ("retry", 5)


# ---- dump ---------------------------------------------------------------------------------------

def test_lost_process_without_replacement_is_dumped_by_the_survivors():
    ranks = [5, {"step": 5, "dead": True}, 5, 5]
    p = nat.plan_fault(ranks, {1: "node"}, DP4_R2)
    assert (p["strategy"], p["replace"], p["repair_set"], p["dead"]) == ("dump", {1}, set(), {1})
    assert p["why"] == "faults 1:node repair_step=5 repair_set=[] repairable=1 dump_possible=1"
    assert p["savers"] == {0: [0, 3]}
    assert p["cluster_offer"] == ["dump", "exit"]  # nothing milder than the decision


def test_unknown_error_is_dumped():
    p = nat.plan_fault(AT_5, {2: "unknown"}, DP4_R2)
    assert (p["strategy"], p["savers"]) == ("dump", {0: [0, 1]})
    assert p["cluster_offer"] == ["dump", "exit"]


def test_a_fault_before_any_step_completed_ends_the_job_without_asking_for_a_save():
    # seen on a GPU: a fault in step 1 was decided dump of step -1, and every saver failed its save
    p = nat.plan_fault([-1, -1, -1, -1], {2: "unknown"}, DP4_R2)
    assert (p["strategy"], p["repair_step"], p["dump_possible"]) == ("exit", -1, False)
    assert p["exit_reason"].endswith("; nothing to dump: no step has completed yet")
    assert "dump" not in p["cluster_offer"]


def test_a_lost_process_whose_peer_has_a_memory_error_ends_the_job():
    p = nat.plan_fault([5, 5, 5, {"step": 5, "dead": True}], {1: "memory", 3: "node"}, DP4_R2)
    assert (p["strategy"], p["dump_possible"]) == ("exit", False)


def test_savers_at_dump_time_leave_out_ranks_learned_untrustworthy_since_the_decision():
    ranks = [5, {"step": 5, "excluded": True}, 5, 5, 5, 5, {"step": 5, "joining": True}, 5]
    d = nat.plan_dump(ranks, DP8_R2, unavailable={0}, pending={4: "communication", 2: "node", 3: "memory"})
    assert d["unavailable"] == {0, 1, 2, 3, 6}
    assert d["savers"] == {0: [4, 5, 7]} and d["refusal"] == (
        "dump impossible, no complete replica: type 0 group 0 shard 2 (holders [2,6] all dead, faulty or behind);")


def test_dump_with_every_shard_held_has_no_refusal():
    d = nat.plan_dump(AT_5, DP4_R2, unavailable={1}, pending={2: "communication"})
    assert (d["savers"], d["refusal"]) == ({0: [0, 3]}, "")


def test_dump_without_a_layout_is_refused():
    assert nat.plan_dump([5, 5], [])["refusal"] == "dump impossible, no complete replica: no replica layout was reported"


# ---- recover: process replacement (ARF) --------------------------------------------------------

def test_lost_process_with_replacement_is_recovered_from_its_peer():
    ranks = [5, 5, {"step": 5, "dead": True}, 5]
    p = nat.plan_fault(ranks, {2: "node"}, DP4_R2, recover=True)
    assert (p["strategy"], p["replace"], p["unavailable"]) == ("recover", {2}, {2})
    assert p["cluster_offer"] == ["recover", "dump", "exit"]
    r = nat.plan_repair(ranks, {2: "node"}, DP4_R2)
    assert r["by_rank"] == {0: [(0, RT["SEND"], [0], [2], [0, 2])], 2: [(0, RT["RECV_REPAIR"], [0], [2], [0, 2])]}


def test_with_elastic_training_the_cluster_manager_is_offered_the_scale_in_for_lost_processes_only():
    """The reference's "downgrade": the scale-in without waiting for replacements, which the cluster manager
    may choose when it knows none will come; only for lost processes, and only where every shard survives."""
    ranks = [5, 5, {"step": 5, "dead": True}, 5]
    p = nat.plan_fault(ranks, {2: "node"}, DP4_R2, recover=True, elastic=True)
    assert (p["strategy"], p["cluster_offer"]) == ("recover", ["recover", "downgrade", "dump", "exit"])
    # The communication errors a loss causes in live peers do not stand in its way: those ranks go on.
    p = nat.plan_fault(ranks, {1: "communication", 2: "node"}, DP4_R2, recover=True, elastic=True)
    assert "downgrade" in p["cluster_offer"]
    # A live rank's memory error: it would have to leave the job first; not offered, not even beside a loss.
    p = nat.plan_fault([5, 5, 5, 5], {2: "memory"}, DP4_R2, recover=True, elastic=True)
    assert "downgrade" not in p["cluster_offer"]
    p = nat.plan_fault(ranks, {1: "memory", 2: "node"}, DP4_R2, recover=True, elastic=True)
    assert "downgrade" not in p["cluster_offer"]
    # A communication error alone is no loss.
    p = nat.plan_fault([5, 5, 5, 5], {2: "communication"}, DP4_R2, recover=True, elastic=True)
    assert "downgrade" not in p["cluster_offer"]
    # Ranks 1 and 3 hold shard 1 alone: no survivor holds it, no dump and no scale-in.
    ranks = [5, {"step": 5, "dead": True}, 5, {"step": 5, "dead": True}]
    p = nat.plan_fault(ranks, {1: "node", 3: "node"}, DP4_R2, recover=True, elastic=True)
    assert p["cluster_offer"] == ["exit"]
    assert "downgrade" not in nat.plan_fault([5, 5, {"step": 5, "dead": True}, 5], {2: "node"}, DP4_R2,
                                             recover=True)["cluster_offer"]


def test_a_replacement_still_joining_counts_as_dead_and_prevents_a_reload():
    ranks = [{"step": 5, "ckpt_step": 4}] * 2 + [{"step": -1, "joining": True}, {"step": 5, "ckpt_step": 4}]
    p = nat.plan_fault(ranks, {2: "node"}, DP4_R2, recover=True)
    assert (p["dead"], p["unavailable"], p["reloadable_step"], p["strategy"]) == ({2}, {2}, -1, "recover")


def test_replacement_needs_a_peer_of_every_lost_rank():
    ranks = [5, {"step": 5, "dead": True}, 5, {"step": 5, "dead": True}]
    p = nat.plan_fault(ranks, {1: "node", 3: "node"}, DP4_R2, recover=True)
    assert (p["strategy"], p["repairable"]) == ("exit", False)


def test_a_policy_escalating_a_memory_error_replaces_the_faulty_rank():
    p = nat.plan_fault(AT_5, {1: "memory"}, DP4_R2, recover=True, policy="recover")
    assert (p["strategy"], p["chosen"], p["cluster_offer"]) == ("retry", "recover", ["dump", "exit"])
    r = nat.plan_repair(AT_5, {1: "memory", 2: "communication"}, DP4_R2, escalated=True)
    assert (r["replace"], r["repair_set"], r["unavailable"]) == ({1}, set(), {1})
    assert r["by_rank"][1] == [(0, RT["RECV_REPAIR"], [3], [1], [1, 3])]


def test_a_policy_escalating_communication_errors_replaces_every_faulty_rank():
    r = nat.plan_repair(AT_5, {1: "communication", 2: "communication"}, DP4_R2, escalated=True)
    assert r["replace"] == {1, 2}
    assert r["by_type"] == [(0, [3, 0], [1, 2], [0, 1, 2, 3])]


# ---- the policy and the cluster manager ---------------------------------------------------------

def test_a_policy_only_makes_the_decision_more_drastic():
    assert nat.plan_fault(AT_5, {1: "memory"}, DP4_R2, policy="none")["chosen"] == "retry"
    assert nat.plan_fault(AT_5, {1: "memory"}, DP4_R2, policy="dump")["chosen"] == "dump"
    # Recover is not possible without ARF: the next more drastic feasible strategy.
    assert nat.plan_fault(AT_5, {1: "memory"}, DP4_R2, policy="recover")["chosen"] == "dump"


def test_the_cluster_manager_is_offered_what_is_left_after_the_policy():
    p = nat.plan_fault(AT_5, {1: "memory"}, DP4_R2, policy="dump")
    assert p["cluster_offer"] == ["dump", "exit"]


# ---- a second fault during a flow ---------------------------------------------------------------

def test_a_second_fault_during_the_repair_leaves_the_dump_to_the_trusted_ranks():
    # The first decision repaired rank 1; rank 2 reported a memory error during the repair, which
    # falls back to the dump: neither rank 1 (being repaired) nor rank 2 saves.
    first = nat.plan_fault(AT_5, {1: "memory"}, DP4_R2)
    d = nat.plan_dump(AT_5, DP4_R2, unavailable=first["unavailable"], pending={2: "memory"})
    assert (d["unavailable"], d["savers"], d["refusal"]) == ({1, 2}, {0: [0, 3]}, "")


def test_a_second_fault_that_takes_the_last_holder_of_a_shard_ends_the_job():
    first = nat.plan_fault(AT_5, {1: "memory"}, DP4_R2)
    d = nat.plan_dump(AT_5, DP4_R2, unavailable=first["unavailable"], pending={3: "node"})
    assert d["refusal"].endswith("shard 1 (holders [1,3] all dead, faulty or behind);")


def test_faults_found_at_once_are_decided_together_by_the_most_severe():
    p = nat.plan_fault([5, {"step": 5, "dead": True}, 5, 5], {0: "communication", 1: "node", 2: "memory"}, DP4_R2)
    assert p["strategy"] == "dump"
    assert p["why"].startswith("faults 0:communication 1:node 2:memory ")



# ---- the fault-collection window (issue 18) ---------------------------------------------------

LONE_UCE = "a lone memory error, every other rank healthy"
ALL_REPORTED = "every live rank reported"
LATER = nat.COINCIDENT_REPORTS_MS  # the window open long enough for reports of one event to arrive
COMM = "communication"


def test_collection_closes_once_every_live_rank_reported():
    everyone = {0: COMM, 1: COMM, 2: "unknown", 3: "memory"}
    assert nat.collection_can_close(AT_5, everyone, 0) == ALL_REPORTED
    # A dead rank cannot report: the live ones are enough.
    ranks = [5, 5, 5, {"step": 5, "dead": True}]
    assert nat.collection_can_close(ranks, {0: COMM, 1: COMM, 2: COMM, 3: "node"}, 0) == ALL_REPORTED


def test_collection_stays_open_while_a_live_rank_has_not_reported():
    assert nat.collection_can_close(AT_5, {0: COMM, 1: COMM, 2: COMM}, LATER) is None
    assert nat.collection_can_close(AT_5, {1: COMM}, LATER) is None
    assert nat.collection_can_close(AT_5, {1: "unknown"}, LATER) is None


def test_a_lone_memory_error_closes_the_collection():
    assert nat.collection_can_close(AT_5, {1: "memory"}, LATER) == LONE_UCE
    ranks = [5, {"step": 4, "data": "updating"}, 5, 5]
    assert nat.collection_can_close(ranks, {1: "memory"}, LATER) == LONE_UCE


def test_a_memory_error_is_not_lone_before_the_reports_of_one_event_arrived():
    assert nat.collection_can_close(AT_5, {1: "memory"}, LATER - 1) is None


def test_one_more_fault_inside_the_window_keeps_it_open():
    assert nat.collection_can_close(AT_5, {1: "memory", 3: "memory"}, LATER) is None
    assert nat.collection_can_close(AT_5, {1: "memory", 3: COMM}, LATER) is None


def test_a_lost_connection_keeps_the_collection_open():
    assert nat.collection_can_close(AT_5, {1: "memory"}, LATER, connection_losses_pending=True) is None
    everyone = {r: COMM for r in range(4)}
    assert nat.collection_can_close(AT_5, everyone, LATER, connection_losses_pending=True) is None


def test_a_fault_policy_keeps_the_collection_open():
    # It counts reports: a further one may change its answer.
    assert nat.collection_can_close(AT_5, {1: "memory"}, LATER, policy_set=True) is None
    assert nat.collection_can_close(AT_5, {r: COMM for r in range(4)}, LATER, policy_set=True) is None


@pytest.mark.parametrize("ranks", [
    [5, {"step": 5, "data": "copying"}, 5, 5],  # its data half copied: not repaired alone
    [5, 5, 5, {"step": 5, "dead": True}],       # another rank is gone
    [5, 5, 5, {"step": 5, "registered": False}],
])
def test_a_memory_error_is_not_lone_unless_the_rest_is_healthy(ranks):
    assert nat.collection_can_close(ranks, {1: "memory"}, LATER) is None


def test_no_fault_no_early_close():
    assert nat.collection_can_close(AT_5, {}, LATER) is None
