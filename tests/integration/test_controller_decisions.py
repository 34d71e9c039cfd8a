"""Every decision the controller takes after a fault, seen from the wire: scripted ranks (sockets of
the test process) report a status and a fault, and the test reads the controller's decision, the
plan it logged and the actions each rank was sent. Written from the controller's behaviour before
its planning moved into a pure planner (issue 14), so the move is checked against it."""
import pytest

from scripted_ranks import ScriptedJob, wait_until

pytestmark = pytest.mark.integration

DP4_R2 = [(0, 2, [0, 1, 2, 3])]  # shard 0 held by ranks 0 and 2, shard 1 by ranks 1 and 3
REPAIR_FLOW = ["prelock", "stop", "clean", "repair", "rollback", "normal"]
DUMP_FLOW = ["prelock", "stop", "save_ckpt", "rename", "exit"]


@pytest.fixture
def scripted(job_env):
    jobs = []

    def make(*args, **kwargs):
        job = ScriptedJob(*args, **kwargs)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.close()


def repairs_sent(job):
    """rank -> [(optimizer_type, repair_type, src, dst)] of the REPAIR it was sent."""
    out = {}
    for rank in job.ranks:
        for _, action in rank.received("repair"):
            out[rank.rank] = [(r["optimizer_type"], r["repair_type"], r["src"], r["dst"]) for r in action["repair"]]
    return out


def test_memory_error_is_repaired_online_from_the_replica_peer(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[1].report("uce")
    job.wait_event("repair_plan")
    wait_until(lambda: len(job.events("state")) >= 5 and job.events("state")[-1] == "REPAIR->NORMAL", 10, "NORMAL")
    assert job.events("decision") == [
        "retry: faults 1:memory repair_step=5 repair_set=[1] repairable=1 dump_possible=1"]
    assert job.events("repair_plan") == ["type 0 src=[3] dst=[1]"]
    # 0 SEND for the source, 1 UCE_HIGHLEVEL for the rank whose clean did not say otherwise.
    assert repairs_sent(job) == {1: [(0, 1, [3], [1])], 3: [(0, 0, [3], [1])]}
    assert job.actions_of(1) == REPAIR_FLOW and job.actions_of(0) == ["prelock", "stop", "clean", "rollback", "normal"]
    stop = job.ranks[0].received("stop")[0][1]
    assert (stop["strategy"], stop["step"], stop["is_uce"], stop["error_ranks"]) == (1, 5, True, [1])


def test_clean_result_2_makes_the_receiver_uce_lowlevel(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[1].results["clean"] = 2  # the memory error needs no rebuild
    job.ranks[1].report("uce_corrupted")
    job.wait_event("repair_plan")
    wait_until(lambda: job.actions_of(1)[-1:] == ["normal"], 10, "NORMAL on rank 1")
    assert repairs_sent(job)[1] == [(0, 2, [3], [1])]


def test_communication_error_retries_without_a_repair(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[2].report("hccl_failed")
    wait_until(lambda: job.actions_of(2)[-1:] == ["normal"], 10, "NORMAL on rank 2")
    assert job.events("decision") == [
        "retry: faults 2:communication repair_step=5 repair_set=[] repairable=1 dump_possible=1"]
    assert job.actions_of(2) == ["prelock", "stop", "clean", "rollback", "normal"]
    assert not job.events("repair_plan")


def test_laggard_mid_update_is_repaired_like_a_corrupted_rank(scripted, monkeypatch):
    monkeypatch.setenv("MINDIO_PRELOCK_TIMEOUT", "0.1")
    monkeypatch.setenv("MINDIO_PRELOCK_TRIES", "1")
    job = scripted(4, [5, 5, 4, 5], DP4_R2, data={2: "updating"})
    job.ranks[1].report("uce")
    job.wait_event("repair_plan")
    assert job.events("prelock_wait") == ["step 5 laggards [2]"]
    assert job.events("prelock_timeout") == ["try 1/1 laggards [2]"]
    assert job.events("decision") == [
        "retry: faults 1:memory repair_step=5 repair_set=[1,2] repairable=1 dump_possible=1"]
    assert job.events("repair_plan") == ["type 0 src=[3,0] dst=[1,2]"]
    wait_until(lambda: job.actions_of(2)[-1:] == ["normal"], 10, "NORMAL on rank 2")
    assert repairs_sent(job)[2] == [(0, 1, [3, 0], [1, 2])]
    assert repairs_sent(job)[0] == [(0, 0, [3, 0], [1, 2])]


def test_update_peer_of_a_faulty_rank_behind_the_step_is_not_waited_for(scripted):
    # Ranks 0 and 1 update together (block 0); rank 1 failed before completing step 5, so rank 0 never can.
    job = scripted(4, [4, 4, 5, 5], DP4_R2)
    job.ranks[1].report("uce")
    job.wait_event("repair_plan")
    assert job.events("prelock_skip") == ["step 5 blocked [0]"]
    assert not job.events("prelock_wait")
    assert job.events("decision") == [
        "retry: faults 1:memory repair_step=5 repair_set=[0,1] repairable=1 dump_possible=1"]
    assert job.events("repair_plan") == ["type 0 src=[2,3] dst=[0,1]"]


def test_no_complete_replica_and_no_checkpoint_exits(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[1].report("uce")
    job.ranks[3].report("uce")
    job.wait_state("EXIT")
    job.wait_event("exit")
    why = "faults 1:memory 3:memory repair_step=5 repair_set=[1,3] repairable=0 dump_possible=0 reload_step=-1"
    assert job.events("decision") == ["exit: " + why]
    assert job.events("exit") == ["no recovery possible: " + why + "; dump impossible, no complete replica: type 0 "
                                  "group 0 shard 1 (holders [1,3] all dead, faulty or behind);"]
    wait_until(lambda: job.actions_of(0)[-1:] == ["exit"], 10, "EXIT on rank 0")
    assert job.actions_of(0) == ["prelock", "exit"]


def test_no_complete_replica_reloads_the_common_checkpoint(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2, ckpt_steps={r: 4 for r in range(4)})
    job.ranks[1].report("uce")
    job.ranks[3].report("uce")
    wait_until(lambda: job.actions_of(0)[-1:] == ["normal"], 10, "NORMAL on rank 0")
    assert job.events("decision") == ["retry: faults 1:memory 3:memory repair_step=5 repair_set=[1,3] "
                                      "repairable=0 dump_possible=0 reload_step=4"]
    # LOAD_CKPT (5) to every rank, no sources; every later action names the checkpoint's step.
    assert repairs_sent(job) == {r: [(0, 5, [], [])] for r in range(4)}
    assert [a["step"] for _, a in job.ranks[0].received("rollback")] == [4]
    assert job.events("repair_plan") == []


def test_ranks_with_different_checkpoints_cannot_reload(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2, ckpt_steps={0: 4, 1: 4, 2: 4, 3: 2})
    job.ranks[1].report("uce")
    job.ranks[3].report("uce")
    job.wait_event("exit")
    assert job.events("decision")[0].endswith("reload_step=-1")


def test_lost_process_without_replacement_dumps_from_the_survivors(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2, heartbeat_ms={1: 50})
    job.ranks[1].close()
    job.wait_event("exit")
    assert job.events("decision") == [
        "dump: faults 1:node repair_step=5 repair_set=[] repairable=1 dump_possible=1"]
    assert job.events("savers") == ["type 0 step 5 [0,3]"]
    wait_until(lambda: job.actions_of(0)[-1:] == ["exit"], 10, "EXIT on rank 0")
    assert job.actions_of(0) == DUMP_FLOW and job.actions_of(3) == ["prelock", "stop", "save_ckpt", "exit"]
    save = job.ranks[0].received("save_ckpt")[0][1]
    assert (save["strategy"], save["step"], save["save"]) == (3, 5, [{"optimizer_type": 0, "ranks": [0, 3]}])
    assert job.events("exit") == ["dump of step 5 complete"]


def test_unknown_error_dumps(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[2].report("unknown")
    job.wait_event("exit")
    assert job.events("decision") == [
        "dump: faults 2:unknown repair_step=5 repair_set=[] repairable=1 dump_possible=1"]
    assert job.events("savers") == ["type 0 step 5 [0,1]"]


def test_memory_error_with_online_repair_off_dumps_without_the_faulty_rank(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2, enable_uce=False)
    job.ranks[0].report("uce")
    job.wait_event("exit")
    assert job.events("decision") == [
        "dump: faults 0:memory repair_step=5 repair_set=[0] repairable=1 dump_possible=1"]
    assert job.events("savers") == ["type 0 step 5 [1,2]"]


def test_memory_error_without_a_layout_or_checkpoint_exits(scripted):
    job = scripted(2, [5, 5])
    job.ranks[1].report("uce")
    job.wait_event("exit")
    why = "faults 1:memory repair_step=5 repair_set=[1] repairable=0 dump_possible=0 reload_step=-1"
    assert job.events("decision") == ["exit: " + why]
    assert job.events("exit") == ["no recovery possible: " + why + "; dump impossible, no complete replica:"]


def test_second_fault_during_the_repair_falls_back_to_a_dump_without_the_new_faulty_rank(scripted):
    job = scripted(4, [5, 5, 5, 5], DP4_R2)
    job.ranks[0].delays["clean"] = 0.5
    job.ranks[1].report("uce")
    wait_until(lambda: job.ranks[3].received("clean"), 10, "CLEAN")
    job.ranks[2].report("uce")
    job.wait_event("exit")
    assert job.events("decision") == [
        "retry: faults 1:memory repair_step=5 repair_set=[1] repairable=1 dump_possible=1"]
    assert job.events("dump") == ["clean failed or a new fault arrived during repair"]
    # Rank 1 (being repaired) and rank 2 (the new memory error) are not trusted to save.
    assert job.events("savers") == ["type 0 step 5 [0,3]"]
    assert "stop" not in [n for n in job.actions_of(0)[2:]]  # the dump does not stop the ranks again


def test_process_replacement_repairs_the_restarted_process(scripted):
    from scripted_ranks import ScriptedRank

    job = scripted(4, [5, 5, 5, 5], DP4_R2, enable_arf=True, heartbeat_ms={2: 50})
    job.ranks[2].close()
    job.wait_event("offline")
    assert job.events("decision") == [
        "recover: faults 2:node repair_step=5 repair_set=[] repairable=1 dump_possible=1"]
    replacement = ScriptedRank(job.port, 2, 4, restarted=True)
    job.ranks[2] = replacement
    replacement.report("prerepair_finish")
    wait_until(lambda: replacement.received("normal"), 10, "NORMAL on the replacement")
    assert job.events("repair_plan") == ["type 0 src=[0] dst=[2]"]
    # 3 RECV_REPAIR for the replacement, 0 SEND for its peer.
    assert repairs_sent(job) == {0: [(0, 0, [0], [2])], 2: [(0, 3, [0], [2])]}
    assert replacement.received()[0][0] == "rebuild_group"
    rebuild = job.ranks[1].received("rebuild_group")[0][1]
    assert (rebuild["strategy"], rebuild["error_ranks"]) == (2, [2])
    assert job.actions_of(1) == ["prelock", "stop", "clean", "rebuild_group", "rollback", "normal"]
