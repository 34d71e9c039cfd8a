"""Process replacement (ARF) with real processor processes: a SIGKILLed rank is replaced by a
restarted process of the same rank, repaired from its replica peer, and training resumes at the same
step; a replacement that never comes leads to a dump (or, with elastic training, a scale-in, which a live
rank of a lost data-parallel slice leaves, and after which the controller plans on the layout the survivors
report); registrations that may not replace are refused."""
import contextlib
import re
import signal
import time

import pytest

from controller_harness import Job, actions_in_order, wait_until
from mindio_adaptor.core.detection.exit_codes import LEFT_THE_JOB
from mindio_adaptor.launch.controller_report import ControllerContact, ControllerReportError, report_no_replacement
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("arrives", ["during_the_wait", "before_the_decision", "unmarked"])
def test_killed_rank_is_replaced_repaired_and_training_resumes(tmp_path, job_env, monkeypatch, arrives):
    # With the job's token the refused replacement below proved it belongs to the job: its refusal is
    # an event. (Without a token nobody proves it, and refusals are only counted and summarised.)
    monkeypatch.setenv("MINDIO_TOKEN", "arf-test-token")
    # 0.5 s heartbeat: starting the replacement's interpreter on a loaded 2-core host has stalled
    # healthy ranks past three 0.2 s periods (declared dead, so the replacement ended in a dump).
    job = Job(tmp_path, 8, enable_arf=True, heartbeat_s=0.5)
    reports = []
    for action in ("report_fault_ranks", "report_result"):
        ctl.tft_register_mindx_callback(action, lambda *a, action=action: reports.append((action, a)))
    try:
        job.wait_ready()
        # A restarted process may not take the place of a live rank.
        extra = job.spawn(2, restarted=True, track=False)
        assert extra.wait(timeout=20) == 3
        [refused] = job.events_of(2, "start_error")
        assert "rank 2 is alive and connected" in refused["start_error"], refused
        assert [d for _, _, d in job.controller_events("register_refused")] == [
            "rank 2: rank 2 is alive and connected: a restarted process may only replace a dead rank"]
        assert ctl.controller_state() == "NORMAL" and not job.controller_events("fault")

        job.procs[5].send_signal(signal.SIGKILL)
        if arrives != "before_the_decision":  # the reference's order: offline first, then the restart registers
            wait_until(lambda: job.controller_events("arf_wait"), 10, "the controller waiting for rank 5")
        else:  # a fast launcher: the restart registers while the controller still gathers faults
            wait_until(lambda: job.controller_events("dead"), 5, "rank 5 declared dead")
        # unmarked: a launcher other than ours (no MINDIO_RESTARTED); the controller decides, as the reference's
        job.spawn(5, restarted=arrives != "unmarked")
        results = job.wait_results(range(8), timeout=30)
        assert all(r["result"] == "done" and r["repair_type"] == "recover" and r["step"] == 10
                   for r in results.values()), results
        assert job.events_of(5, "restarted") == [{"rank": 5, "restarted": True, "reboot_type": "arf"}]
        assert actions_in_order(job) == ["prelock", "stop", "clean", "rebuild_group", "repair", "rollback", "normal"]
        targets = {d.split(" ")[0]: d.split("ranks=")[1] for _, _, d in job.controller_events("action")}
        survivors, everyone = "[0,1,2,3,4,6,7]", "[0,1,2,3,4,5,6,7]"
        assert targets == {"prelock": survivors, "stop": survivors, "clean": survivors, "rebuild_group": everyone,
                           "repair": "[1,5]", "rollback": everyone, "normal": everyone}
        assert [d for _, _, d in job.controller_events("offline")] == ["rank 5"]
        assert [d for _, _, d in job.controller_events("replacement")] == ["rank 5"]
        assert job.controller_events("arf_ready")
        states = [d for _, _, d in job.controller_events("state")]
        assert states[-4:] == ["NORMAL->ABNORMAL", "ABNORMAL->ENV_CLEAR", "ENV_CLEAR->REPAIR", "REPAIR->NORMAL"]
        # DP [0..7], R=2: rank 5's shard is also held by rank 1, which sends it to the new process.
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[1] dst=[5]"]
        info = {"type": [0], "src": [1], "dst": [5], "rank_list": [1, 5]}
        assert job.handler_calls(1, "repair") == [[5, False, [5], dict(info, repair_type=0)]]  # SEND
        assert job.handler_calls(5, "repair") == [[5, False, [5], dict(info, repair_type=3)]]  # RECV_REPAIR
        for rank in range(8):
            assert job.handler_calls(rank, "rebuild_group") == [[[5]]], rank
            assert job.handler_calls(rank, "rollback") == [[5]], rank
            expected_stops = 0 if rank == 5 else 1
            assert len(job.handler_calls(rank, "stop")) == expected_stops, rank
        assert ("report_fault_ranks", ({5: 1},)) in reports
        assert reports[-1][0] == "report_result" and reports[-1][1][0] == 0 and reports[-1][1][3] == "recover"
        assert all(p.wait(timeout=10) == 0 for p in job.procs.values())
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_replaced_rank_is_a_replica_source_before_its_first_step(tmp_path, job_env, monkeypatch):
    """Rank 5 is killed and replaced; before its new process completes a step (the workers stay idle after the
    repair), rank 1, the other holder of its shard, is killed too. The new rank 5 holds the repair step's state, so
    it is the source of rank 1's repair. (In a Megatron job the same came after a hot switch: tests/e2e/
    test_chaos_sequences.py; these workers report their step at the rollback, which hid it here.)"""
    job = Job(tmp_path, 8, enable_arf=True, heartbeat_s=0.5, idle_after_repair=1)
    try:
        job.wait_ready()
        for count, lost in enumerate((5, 1), start=1):
            job.procs[lost].send_signal(signal.SIGKILL)
            wait_until(lambda: len(job.controller_events("arf_wait")) == count, 10, f"the wait for rank {lost}")
            job.spawn(lost, restarted=True)
            wait_until(lambda: sum(d == "REPAIR->NORMAL" for _, _, d in job.controller_events("state")) == count, 30,
                       f"rank {lost} replaced")
        decisions = [d for _, _, d in job.controller_events("decision")]
        assert [d.split(":")[0] for d in decisions] == ["recover", "recover"], decisions
        plans = [d for _, _, d in job.controller_events("repair_plan")]
        assert plans == ["type 0 src=[1] dst=[5]", "type 0 src=[5] dst=[1]"], plans
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_silent_rank_is_replaced_by_a_restarted_process(tmp_path, job_env, monkeypatch):
    # A node cut off from the network keeps its connections open for minutes: its ranks are only silent. The
    # launcher that took the node over starts their replacements, which take the silent ranks' places at once,
    # not after the hang rule or the silence limit named them (a hang outside a timed section waited 60 s,
    # and the refused replacements crashed until their launcher gave up).
    monkeypatch.setenv("MINDIO_TOKEN", "arf-test-token")
    job = Job(tmp_path, 4, enable_arf=True, heartbeat_s=0.5)
    stalled = job.procs[2]
    try:
        job.wait_ready()
        stalled.send_signal(signal.SIGSTOP)
        wait_until(lambda: any(d.startswith("rank 2 silent") for _, _, d in job.controller_events("suspect")), 15,
                   "rank 2 a suspect")
        job.spawn(2, restarted=True)
        results = job.wait_results(range(4), timeout=30)
        assert all(r["result"] == "done" and r["repair_type"] == "recover" for r in results.values()), results
        assert [d for _, _, d in job.controller_events("dead")] == [
            "rank 2: silent and a restarted process registered in its place"]
        assert [d for _, _, d in job.controller_events("replacement")] == ["rank 2"]
        assert not job.controller_events("register_refused")
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        stalled.kill()  # as its launcher would, fenced off by the one that took its node over
        job.close()


def test_replacement_that_never_comes_leads_to_a_dump(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 8, enable_arf=True, heartbeat_s=0.5)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("dead"), 5, "rank 5 declared dead")
        # A process of the dead rank that may not replace it (no enable_arf, no MINDIO_RESTARTED) is refused.
        impostor = job.spawn(5, track=False, enable_arf=0)
        assert impostor.wait(timeout=20) == 3
        [refused] = job.events_of(5, "start_error")
        assert "rank 5 was declared dead; only a restarted process" in refused["start_error"], refused
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live, timeout=30)
        assert all(r["result"] == "exit" for r in results.values()), results
        assert actions_in_order(job) == ["prelock", "stop", "clean", "save_ckpt", "rename", "exit"]
        [timeout] = [d for _, _, d in job.controller_events("arf_timeout")]
        assert "timed out after 1500 ms (MINDIO_ARF_WAIT_S): no restarted process registered for ranks [5]" in timeout
        [dump] = [d for _, _, d in job.controller_events("dump")]
        assert dump == timeout
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1,2,3]"]
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["ENV_CLEAR->DUMP", "DUMP->EXIT"]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_process_restarted_while_the_job_ends_is_told_the_job_ends(tmp_path, job_env, monkeypatch):
    """A process restarted for the dead rank registers while the controller saves the dump (rank 0's save
    hangs): refused because the job ends (RegisterAck kJobEnding), which the processor raises as JobEnding.
    The adaptor then ends the rank with the job's code (patches/controller_link) instead of failing, which its
    launcher would answer by starting it again, and once its restarts ran out by restarting the group."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 8, enable_arf=True, heartbeat_s=0.5, hang_in="save_ckpt", hang_rank=0)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: "ENV_CLEAR->DUMP" in [d for _, _, d in job.controller_events("state")], 20, "the dump")
        late = job.spawn(5, restarted=True, track=False)
        assert late.wait(timeout=20) == 3
        [refused] = job.events_of(5, "start_error")
        assert refused["start_error_type"] == "JobEnding", refused
        assert "while the controller is in state DUMP, where no process is replaced" in refused["start_error"]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_rank_its_launcher_reports_unreplaced_scales_in_without_waiting_out_the_default(tmp_path, job_env,
                                                                                            monkeypatch):
    """Elastic training with the default wait for a replacement (600 s): node 0's launcher reports that
    nothing will replace rank 5 (its node's launcher is gone and no standby waits), and the controller
    ends the wait at once and scales in. One sent while the rank still talked (a stalled launcher) was
    forgotten at its next heartbeat. Reports with another token, or naming a rank out of range, are
    refused, naming why, and change nothing."""
    monkeypatch.delenv("MINDIO_ARF_WAIT_S", raising=False)
    monkeypatch.setenv("MINDIO_TOKEN", "s3cret")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5)
    contact = ControllerContact("127.0.0.1", job.port, "s3cret")
    why = "node 2's launcher is gone (its lifeline refuses connections) and no standby waits to take its place"
    try:
        job.wait_ready()
        with pytest.raises(ControllerReportError, match=r"refused the report: wrong token"):
            report_no_replacement(ControllerContact("127.0.0.1", job.port, "guess"), [5], why)
        with pytest.raises(ControllerReportError, match=r"refused the report: rank 8 is out of range 0\.\.7"):
            report_no_replacement(contact, [5, 8], why)
        # A report about a rank that still talks (its launcher stalled, its process lives) is forgotten when
        # the rank is next heard from: it does not end a later wait for that rank's replacement.
        stalled = "node 2 is lost (its beat was silent for 10 s) and no standby waits to take its place"
        report_no_replacement(contact, [5], stalled)
        time.sleep(4 * 0.5)  # heartbeats every 0.5 s
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("arf_wait"), 15, "the wait for rank 5's replacement")
        time.sleep(2)
        assert not job.controller_events("scale_in") and not job.controller_events("arf_unreplaced")
        assert report_no_replacement(contact, [5], why) == f"noted: ranks [5] will not be replaced: {why}"
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live, timeout=30)
        assert all(r["result"] == "done" for r in results.values()), results
        [wait] = [d for _, _, d in job.controller_events("arf_wait")]
        assert wait == "ranks [5] up to 600000 ms", wait
        [scale_in] = [d for _, _, d in job.controller_events("scale_in")]
        assert scale_in == f"ranks [5] at step 5: ranks [5] will not be replaced: {why} (not waiting out " \
                           f"MINDIO_ARF_WAIT_S)", scale_in
        assert [d for _, _, d in job.controller_events("no_replacement")] == [
            f"ranks [5] will not be replaced: {stalled}", f"ranks [5] will not be replaced: {why}"]
        assert [d for _, _, d in job.controller_events("retired")] == ["rank 5"]
        assert not job.controller_events("arf_timeout") and not job.controller_events("dump")
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_replacement_that_never_comes_scales_in_with_elastic_training(tmp_path, job_env, monkeypatch):
    """The same loss with elastic training: the dump is saved, rank 5 is retired, and the survivors rebuild
    their groups, reload the dump (LOAD_CKPT under strategy scale_in), roll back and train on."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live, timeout=30)
        assert all(r["result"] == "done" for r in results.values()), results
        assert actions_in_order(job) == ["prelock", "stop", "clean", "save_ckpt", "rename", "rebuild_group",
                                         "repair", "rollback", "normal"]
        [scale_in] = [d for _, _, d in job.controller_events("scale_in")]
        assert scale_in.startswith("ranks [5] at step 5: process replacement timed out after 1500 ms "
                                   "(MINDIO_ARF_WAIT_S)"), scale_in
        assert not job.controller_events("dump")
        assert [d for _, _, d in job.controller_events("retired")] == ["rank 5"]
        for rank in live:
            assert job.handler_calls(rank, "rebuild_group") == [[[5]]], rank
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["ENV_CLEAR->REPAIR", "REPAIR->NORMAL"]
        # A process that comes for rank 5 after the scale-in is its return (a scale-out, once every retired rank
        # is back); this job has completed, so nothing scales out, and losing that process is no fault.
        faults = len(job.controller_events("fault"))
        late = job.spawn(5, restarted=True, track=False)
        wait_until(lambda: job.controller_events("returned"), 20, "rank 5's return")
        late.kill()
        late.wait(timeout=10)
        wait_until(lambda: job.controller_events("return_lost"), 10, "the returned process's loss")
        assert not job.controller_events("scale_out") and len(job.controller_events("fault")) == faults
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_the_cluster_manager_s_downgrade_scales_in_without_waiting_for_a_replacement(tmp_path, job_env, monkeypatch):
    """The cluster manager knows no replacement will come (no spare node): offered the scale-in as the
    reference's "downgrade", it chooses it, and the controller scales in at once instead of waiting
    MINDIO_ARF_WAIT_S (a minute here) for rank 5's replacement."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "60")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5)
    offers = []

    def choose(faults, strategies):
        offers.append((faults, strategies))
        ctl.tft_notify_controller_change_strategy("downgrade")

    ctl.tft_register_mindx_callback("report_strategies", choose)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live, timeout=30)  # well inside the 60 s wait
        assert all(r["result"] == "done" for r in results.values()), results
        assert offers == [({5: 1}, ["recover", "downgrade", "dump", "exit"])]
        assert [d for _, _, d in job.controller_events("cluster_strategy")] == ["downgrade"]
        assert not job.controller_events("arf_wait") and not job.controller_events("dump")
        assert actions_in_order(job) == ["prelock", "stop", "save_ckpt", "rename", "rebuild_group", "repair",
                                         "rollback", "normal"]
        [scale_in] = [d for _, _, d in job.controller_events("scale_in")]
        assert scale_in == "ranks [5] at step 5: the cluster manager chose the scale-in (downgrade): no " \
                           "replacement is awaited", scale_in
        assert [d for _, _, d in job.controller_events("retired")] == ["rank 5"]
        for rank in live:
            assert job.handler_calls(rank, "rebuild_group") == [[[5]]], rank
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["ENV_CLEAR->REPAIR", "REPAIR->NORMAL"]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_live_rank_of_a_lost_slice_leaves_and_the_survivors_go_on(tmp_path, job_env, monkeypatch):
    """tp2 x dp4 (data-parallel lists [0,2,4,6] and [1,3,5,7]): rank 5 is lost and not replaced, so its
    slice, data-parallel index 2, goes with it, and rank 4, alive, leaves. It answers REBUILD_GROUP that it
    leaves (LEAVES_THE_JOB) and its process exits LEFT_THE_JOB; the controller retires it with rank 5, sends
    it nothing more, and the six survivors load, roll back and train on."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, tp=2)
    try:
        job.wait_ready()
        job.procs[5].send_signal(signal.SIGKILL)
        survivors = [0, 1, 2, 3, 6, 7]
        results = job.wait_results(survivors, timeout=30)
        assert all(r["result"] == "done" for r in results.values()), results
        assert job.procs[4].wait(timeout=10) == LEFT_THE_JOB
        assert job.events_of(4, "leaves") == [{"rank": 4, "leaves": [5]}]
        assert [job.handler_calls(4, name) for name in ("rebuild_group", "repair", "rollback")] == [[[[5]]], [], []]
        for rank in survivors:
            assert job.handler_calls(rank, "rebuild_group") == [[[5]]], rank
            assert len(job.handler_calls(rank, "rollback")) == 1, rank
        assert [d for _, _, d in job.controller_events("left_with_slice")] == ["ranks [4]"]
        assert sorted(d for _, _, d in job.controller_events("retired")) == ["rank 4", "rank 5"]
        assert not job.controller_events("dump") and not job.controller_events("action_failed")
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["ENV_CLEAR->REPAIR", "REPAIR->NORMAL"]
        # Its departure is no fault: nothing after the scale-in was reported or decided about it.
        assert not [d for _, _, d in job.controller_events("fault") if "rank 4" in d]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


@contextlib.contextmanager
def scaled_in_to_dp6(tmp_path, monkeypatch, **worker_args):
    """dp8 R=2 loses ranks 6 and 7 (a node) and, with no replacement, scales in to dp6 R=2: at its
    REBUILD_GROUP every survivor reports the layout at dp6 (the worker's --relayout), which replaces the
    controller's. The survivors train on and wait again (--idle-after-repair)."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, relayout=1, idle_after_repair=1,
              **worker_args)
    try:
        job.wait_ready()
        for rank in (6, 7):
            job.procs[rank].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("relayout"), 30, "the layout at dp6")
        wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "training at dp6")
        assert [d for _, _, d in job.controller_events("relayout")] == ["type 0 R=2 [0,1,2,3,4,5]"]
        assert [(s["replica_cnt"], s["ranks"]) for s in ctl.controller_layout()] == [(2, [0, 1, 2, 3, 4, 5])]
        yield job
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_process_lost_while_scaled_in_scales_in_again_on_the_smaller_layout(tmp_path, job_env, monkeypatch):
    """At dp6 R=2 (scaled_in_to_dp6) rank 3 is lost: on the layout of the start its shard's other holder, 7,
    is gone and no scale-in would be possible; on dp6's (shards {0,3} {1,4} {2,5}) every shard has a holder. No
    process replacement is waited for at the smaller size: the job scales in again at once, to dp5 (R=1: 2
    divides no longer), and trains on."""
    with scaled_in_to_dp6(tmp_path, monkeypatch) as job:
        scaled_at = job.controller_events("relayout")[0][0]
        wait_until(lambda: all(len(job.events_of(r, "ready")) == 2 for r in range(6)), 20, "steps 6..10 at dp6")
        job.procs[3].send_signal(signal.SIGKILL)
        wait_until(lambda: len(job.controller_events("relayout")) == 2, 30, "the layout at dp5")
        wait_until(lambda: all(len(job.events_of(r, "ready")) == 3 for r in (0, 1, 2, 4, 5)), 20, "training at dp5")
        [decision] = [d for _, _, d in job.controller_events("decision")][-1:]
        assert decision.startswith("scale_in: faults 3:node") and "elastic training scales in again" in decision, \
            decision
        assert [d for _, _, d in job.controller_events("relayout")][-1] == "type 0 R=1 [0,1,2,4,5]"
        assert not [t for t, _, _ in job.controller_events("arf_wait") if t > scaled_at]  # no replacement awaited
        [second] = [d for t, _, d in job.controller_events("scale_in") if t > scaled_at]
        assert second.startswith("ranks [3] at step 10") and "scaled in already" in second, second
        assert ctl.controller_state() == "NORMAL"
        assert [(s["replica_cnt"], s["ranks"]) for s in ctl.controller_layout()] == [(1, [0, 1, 2, 4, 5])]


def test_a_memory_error_while_scaled_in_is_dumped_by_the_holders_of_the_smaller_layout(tmp_path, job_env,
                                                                                      monkeypatch):
    """At dp6 R=2 (scaled_in_to_dp6) rank 3 reports a memory error: a live faulty rank is no loss to scale in
    over, and no online repair is built at the smaller size, so the job ends in the dump, saved by the holders
    of dp6's layout (on the start's, rank 3's shard's other holder, 7, is gone)."""
    with scaled_in_to_dp6(tmp_path, monkeypatch, fail_rank=3) as job:
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1,2,3]"]
        scaled_at = job.controller_events("relayout")[0][0]
        wait_until(lambda: all(len(job.events_of(r, "ready")) == 2 for r in range(6)), 20, "steps 6..10 at dp6")
        job.trigger.touch()
        results = job.wait_results([0, 1, 2, 4, 5], timeout=30)
        assert all(r["result"] == "exit" for r in results.values()), results
        [decision] = [d for _, _, d in job.controller_events("decision")][-1:]
        assert decision.startswith("dump: faults 3:") and "scaled in: no online repair or process replacement" \
            in decision, decision
        assert [d for _, _, d in job.controller_events("savers")][-1] == "type 0 step 10 [0,1,2]"
        assert not [t for t, _, _ in job.controller_events("arf_wait") if t > scaled_at]
        second = [d.split(" ")[0] for t, _, d in job.controller_events("action") if t > scaled_at]
        assert second[-4:] == ["stop", "save_ckpt", "rename", "exit"], second
        for rank in (0, 1, 2):
            assert len(job.handler_calls(rank, "save_ckpt")) == 2, rank  # the scale-in's dump, then this one
        assert [d for _, _, d in job.controller_events("state")][-1] == "DUMP->EXIT"


def test_the_scale_out_gives_the_controller_the_layout_of_the_start_again(tmp_path, job_env, monkeypatch):
    """At dp6 (scaled_in_to_dp6), restarted processes of ranks 6 and 7 return: at the scale-out's
    REBUILD_GROUP every rank reports the layout of the start, which the controller plans with again."""
    with scaled_in_to_dp6(tmp_path, monkeypatch) as job:
        for rank in (6, 7):
            job.spawn(rank, restarted=True)
        wait_until(lambda: len(job.controller_events("relayout")) == 2, 40, "the layout after the scale-out")
        wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "training at dp8")
        assert sorted(d for _, _, d in job.controller_events("replica_deferred")) == [
            f"rank {r}: returned, reports again at the scale-out" for r in (6, 7)]
        assert [d for _, _, d in job.controller_events("relayout")][-1] == "type 0 R=2 [0,1,2,3,4,5,6,7]"
        assert [(s["replica_cnt"], s["ranks"]) for s in ctl.controller_layout()] == [(2, list(range(8)))]
        assert not job.controller_events("replica_refused") and not job.controller_events("relayout_incomplete")


def test_a_return_not_ready_within_the_scale_out_wait_is_sent_away(tmp_path, job_env, monkeypatch):
    """The scale-out's wait is its own setting (MINDIO_SCALE_OUT_WAIT_S; the scale-in waited MINDIO_ARF_WAIT_S,
    1.5 s): rank 6 returns but is not ready within 3 s of its return, and rank 7 does not return, so rank 6 is
    sent away and the job stays at dp6."""
    monkeypatch.setenv("MINDIO_SCALE_OUT_WAIT_S", "3")
    with scaled_in_to_dp6(tmp_path, monkeypatch) as job:
        returned = job.spawn(6, restarted=True, track=False, ready_after_s=10)
        wait_until(lambda: job.controller_events("scale_out_abandoned"), 30, "rank 6 sent away")
        [away] = [d for _, _, d in job.controller_events("scale_out_abandoned")]
        assert re.match(r"no scale-out: after \d+ ms \(MINDIO_SCALE_OUT_WAIT_S 3000 ms\) ranks \[7\] have not "
                        r"returned; ranks \[6\] returned but are not ready; returned ranks \[6\] are sent away",
                        away), away
        returned.wait(timeout=30)  # told to exit once ready
        # Told goodbye after its EXIT, it does not register again as a new return (it once did, and a
        # scale-out then started with a process about to exit).
        assert [d for _, _, d in job.controller_events("returned")] == ["rank 6"]
        assert not job.controller_events("scale_out") and ctl.controller_state() == "NORMAL"


def test_a_return_incomplete_within_the_scale_out_wait_grows_the_job_part_of_the_way(tmp_path, job_env,
                                                                                      monkeypatch):
    """Rank 6 returns and is ready, rank 7 does not return within MINDIO_SCALE_OUT_WAIT_S (3 s): the job grows
    from dp6 to dp7 with rank 6 (a partial scale-out, rank 7 named absent to every rank), R=1 at dp7."""
    monkeypatch.setenv("MINDIO_SCALE_OUT_WAIT_S", "3")
    with scaled_in_to_dp6(tmp_path, monkeypatch) as job:
        job.spawn(6, restarted=True, absent=7)
        wait_until(lambda: len(job.controller_events("relayout")) == 2, 40, "the layout after the scale-out")
        wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "training at dp7")
        [partial] = [d for _, _, d in job.controller_events("scale_out_partial")]
        assert re.match(r"partial scale-out: after \d+ ms \(MINDIO_SCALE_OUT_WAIT_S 3000 ms\) ranks \[7\] have not "
                        r"returned; the job grows with the ready ranks \[6\] where their data-parallel slices are "
                        r"whole, without ranks \[7\]$", partial), partial
        [scale_out] = [d for _, _, d in job.controller_events("scale_out")]
        assert re.match(r"ranks \[6\] at step \d+: partial, without ranks \[7\]$", scale_out), scale_out
        assert [d for _, _, d in job.controller_events("relayout")][-1] == "type 0 R=1 [0,1,2,3,4,5,6]"
        assert [(s["replica_cnt"], s["ranks"]) for s in ctl.controller_layout()] == [(1, list(range(7)))]
        assert [d for _, _, d in job.controller_events("rejoined")] == ["rank 6"]
        assert not job.controller_events("scale_out_abandoned") and not job.controller_events("relayout_incomplete")


def test_a_process_registered_during_the_scale_in_is_its_rank_s_return(tmp_path, job_env, monkeypatch):
    """Ranks 6 and 7 are lost. Rank 6's restarted process registers while the controller still awaits both
    (MINDIO_ARF_WAIT_S, 4 s); rank 7's never comes, so the job scales in without both. Rank 6's process, which
    registered before the scale-in retired its rank, is that rank's return: after MINDIO_SCALE_OUT_WAIT_S (3 s)
    the job grows with it to dp7. (It was once forgotten: left waiting for a decision, no scale-out ever came.)"""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "4")
    monkeypatch.setenv("MINDIO_SCALE_OUT_WAIT_S", "3")
    job = Job(tmp_path, 8, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, relayout=1, idle_after_repair=1)
    try:
        job.wait_ready()
        for rank in (6, 7):
            job.procs[rank].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("arf_wait"), 20, "the wait for the replacements")
        job.spawn(6, restarted=True, absent=7)
        wait_until(lambda: len(job.controller_events("relayout")) == 2, 40, "the layout after the scale-out")
        wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "training at dp7")
        [(registered, _, _)] = job.controller_events("replacement")
        [(scaled_in, _, _)] = job.controller_events("scale_in")
        assert registered < scaled_in  # it came during the wait, as a replacement, and returned at the scale-in
        assert [d for _, _, d in job.controller_events("returned")] == ["rank 6"]
        [scale_out] = [d for _, _, d in job.controller_events("scale_out")]
        assert re.match(r"ranks \[6\] at step \d+: partial, without ranks \[7\]$", scale_out), scale_out
        assert [(s["replica_cnt"], s["ranks"]) for s in ctl.controller_layout()] == [(1, list(range(7)))]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_loss_that_leaves_a_shard_without_holders_refuses_the_scale_in_and_ends_the_job(tmp_path, job_env,
                                                                                       monkeypatch):
    """Elastic training, dp4 R=2 (shard 0 held by ranks 0 and 2, shard 1 by 1 and 3): ranks 1 and 3 are lost
    together and not replaced. Shard 1's state is gone with them, so neither process replacement, nor a dump,
    nor a scale-in is possible: the controller says so, naming the shard and its holders, and ends the job
    (the exit, as without elastic training); the survivors are told to exit and nothing scales in."""
    monkeypatch.setenv("MINDIO_ARF_WAIT_S", "1.5")
    job = Job(tmp_path, 4, enable_arf=True, enable_scale_in=True, heartbeat_s=0.5, idle_s=8)
    try:
        job.wait_ready()
        for rank in (1, 3):
            job.procs[rank].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("exit"), 30, "the controller ending the job")
        [decision] = [d for _, _, d in job.controller_events("decision")]
        assert decision.startswith("exit: faults 1:node 3:node") and "dump_possible=0" in decision, decision
        [why] = [d for _, _, d in job.controller_events("exit")]
        assert why.endswith("dump impossible, no complete replica: type 0 group 0 shard 1 (holders [1,3] all dead, "
                            "faulty or behind); elastic training cannot scale in either: no survivor holds these "
                            "shards, the job ends"), why
        # Decided at once: no replacement is awaited (none could bring shard 1 back), nothing is saved or rebuilt.
        assert actions_in_order(job) == ["prelock", "exit"]
        assert not any(job.controller_events(kind) for kind in ("arf_wait", "dump", "scale_in", "retired"))
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["NORMAL->ABNORMAL", "ABNORMAL->EXIT"]
        for rank in (0, 2):
            wait_until(lambda: job.handler_calls(rank, "exit"), 10, f"rank {rank} told to exit")
            assert [job.handler_calls(rank, name) for name in ("stop", "save_ckpt", "rebuild_group", "repair")] == \
                [[], [], [], []], rank
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
