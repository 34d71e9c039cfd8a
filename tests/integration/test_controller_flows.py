"""Recovery flows over real sockets with real processor processes: online repair after a memory
error, dump after a SIGKILL or a hung handler."""
import os
import re
import signal
import time

import pytest

from controller_harness import HEARTBEAT_S, Job, actions_in_order, wait_until

from mindio_adaptor.launch.controller_report import ControllerContact, report_process_ended
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration


def test_memory_error_runs_online_repair_with_right_pairs(tmp_path, job_env):
    job = Job(tmp_path, 8, fail_rank=3)
    try:
        job.wait_ready()
        job.fire()
        results = job.wait_results(range(8))
        assert all(r["result"] == "done" and r["repair_type"] == "retry" for r in results.values()), results
        assert actions_in_order(job) == ["prelock", "stop", "clean", "repair", "rollback", "normal"]
        states = [d for _, _, d in job.controller_events("state")]
        assert states[-4:] == ["NORMAL->ABNORMAL", "ABNORMAL->ENV_CLEAR", "ENV_CLEAR->REPAIR", "REPAIR->NORMAL"]
        # DP [0..7], R=2: rank 3's shard is also held by rank 7.
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[7] dst=[3]"]
        for rank in range(8):
            assert len(job.handler_calls(rank, "stop")) == 1
            assert job.handler_calls(rank, "clean") == [[True]]
            assert job.handler_calls(rank, "rollback") == [[5]]
        repairs = {r: job.handler_calls(r, "repair") for r in range(8)}
        info = {"type": [0], "src": [7], "dst": [3], "rank_list": [3, 7]}
        assert repairs[7] == [[5, False, [3], dict(info, repair_type=0)]]  # SEND
        assert repairs[3] == [[5, True, [3], dict(info, repair_type=1)]]  # UCE_HIGHLEVEL: rebuild first
        assert all(not repairs[r] for r in range(8) if r not in (3, 7))
        assert all(p.wait(timeout=10) == 0 for p in job.procs.values())
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


@pytest.mark.parametrize("ckpt_step", [3, -1])
def test_without_a_replica_every_rank_reloads_the_reported_checkpoint(tmp_path, job_env, ckpt_step):
    # R=1: rank 1's shard has no other holder. With a periodic checkpoint reported by every rank, the
    # controller has every rank load it again online (REPAIR of repair type 5, LOAD_CKPT); without one
    # no recovery is possible (no dump either: the shard's only holder is faulty).
    job = Job(tmp_path, 4, fail_rank=1, replicas=1, ckpt_step=ckpt_step)
    try:
        job.wait_ready()
        job.fire()
        if ckpt_step < 0:
            assert job.wait_results([1])[1]["result"] == "exit"
            wait_until(lambda: all(job.handler_calls(r, "exit") for r in range(4)), 10, "EXIT on every rank")
            decision = [d for _, _, d in job.controller_events("decision")]
            assert decision[0].startswith("exit:") and "reload_step=-1" in decision[0], decision
            return
        results = job.wait_results(range(4))
        decision = [d for _, _, d in job.controller_events("decision")]
        assert all(r["result"] == "done" and r["repair_type"] == "retry" for r in results.values()), results
        assert decision[0].startswith("retry:") and "repairable=0" in decision[0] and "reload_step=3" in decision[0]
        assert actions_in_order(job) == ["prelock", "stop", "clean", "repair", "rollback", "normal"]
        info = {"type": [], "repair_type": 5, "src": [], "dst": [], "rank_list": [0, 1, 2, 3]}
        for rank in range(4):  # error_ranks are the call's dst, as the reference's: none here
            assert job.handler_calls(rank, "repair") == [[3, False, [], info]], rank
            assert job.handler_calls(rank, "rollback") == [[3]], rank
        assert all(p.wait(timeout=10) == 0 for p in job.procs.values())
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_sigkill_is_detected_within_three_heartbeats_and_dumps(tmp_path, job_env):
    job = Job(tmp_path, 8)
    try:
        job.wait_ready()
        killed_at = time.monotonic()
        job.procs[5].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("dead"), 3 * HEARTBEAT_S + 1.0, "rank 5 declared dead")
        detected_after = time.monotonic() - killed_at
        assert detected_after < 3 * HEARTBEAT_S, f"detected after {detected_after:.3f} s"
        assert job.controller_events("dead")[0][2].startswith("rank 5:")
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live)
        assert all(r["result"] == "exit" for r in results.values())
        assert actions_in_order(job) == ["prelock", "stop", "save_ckpt", "rename", "exit"]
        # DP [0..7], R=2, rank 5 dead: shard 1 is saved by rank 1, the others by ranks 0, 2, 3.
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1,2,3]"]
        savers = [r for r in live if job.handler_calls(r, "save_ckpt")]
        assert savers == [0, 1, 2, 3]
        assert job.handler_calls(0, "save_ckpt") == [[5, [{"type": 0, "ranks": [0, 1, 2, 3]}]]]
        assert job.handler_calls(0, "rename") == [[5]]
        assert all(not job.handler_calls(r, "rename") for r in live if r != 0)
        assert all(len(job.handler_calls(r, "exit")) == 1 for r in live)
        assert [d for _, _, d in job.controller_events("state")][-1] == "DUMP->EXIT"
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_silent_rank_is_a_suspect_then_hung_at_the_silence_limit(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_SILENCE_LIMIT_S", "2")
    job = Job(tmp_path, 4)
    try:
        job.wait_ready()
        stopped_at = time.monotonic()
        job.procs[2].send_signal(signal.SIGSTOP)  # alive socket, no heartbeats
        wait_until(lambda: job.controller_events("suspect"), 3 * HEARTBEAT_S + 2.0, "rank 2 suspect")
        suspect_after = time.monotonic() - stopped_at
        assert not job.controller_events("dead") and not job.controller_events("fault")
        wait_until(lambda: job.controller_events("dead"), 5.0, "rank 2 judged hung")
        hung_after = time.monotonic() - stopped_at
        # Silence counts from the last beat, up to one period before the stop.
        assert 3 * HEARTBEAT_S - HEARTBEAT_S <= suspect_after < 2.0 - HEARTBEAT_S <= hung_after < 3.5, (suspect_after, hung_after)
        assert "rank 2 silent for" in job.controller_events("suspect")[0][2]
        assert "silent and hung: ranks [2] silent for more than 2000 ms" in job.controller_events("dead")[0][2]
        job.wait_results([0, 1, 3])
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1]"]
    finally:
        job.procs[2].send_signal(signal.SIGKILL)
        job.close()


def test_handler_beyond_time_limit_leads_to_dump(tmp_path, monkeypatch, job_env):
    monkeypatch.setenv("MINDIO_TEST_ACTION_TIME_LIMIT", "1.0")
    job = Job(tmp_path, 8, fail_rank=3, hang_in="clean", hang_rank=5)
    try:
        job.wait_ready()
        job.fire()
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live)
        assert all(r["result"] == "exit" for r in results.values())
        failed = [d for _, _, d in job.controller_events("action_failed")]
        assert failed == ["clean rank 5: no reply to clean within 1000 ms (handler time limit exceeded)"]
        # Rank 3 (memory error) and rank 5 (timed out) are not trusted: shards 1 and 3 fall to 1 and 7.
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1,2,7]"]
        assert [r for r in live if job.handler_calls(r, "save_ckpt")] == [0, 1, 2, 7]
        assert actions_in_order(job)[:3] == ["prelock", "stop", "clean"]
        assert "repair" not in actions_in_order(job)
        assert actions_in_order(job)[-3:] == ["save_ckpt", "rename", "exit"]
        assert [d for _, _, d in job.controller_events("state")][-2:] == ["ENV_CLEAR->DUMP", "DUMP->EXIT"]
    finally:
        job.procs[5].kill()
        job.close()


def test_a_fault_outside_a_save_waits_for_the_healthy_savers(tmp_path, job_env, monkeypatch):
    # Rank 3 fails while ranks 0-2 are in a checkpoint save: the STOP comes only after the save ended.
    monkeypatch.setenv("MINDIO_SAVE_WAIT_S", "20")
    job = Job(tmp_path, 4, fail_rank=3, save_ranks="0,1,2", save_s=2.0)
    try:
        job.wait_ready()
        job.fire()
        results = job.wait_results(range(4), timeout=30)
        assert all(r["result"] == "done" for r in results.values()), results
        waited = [d for _, _, d in job.controller_events("save_wait")]
        assert len(waited) == 1 and waited[0].startswith("save finished after "), waited
        assert all(job.events_of(r, "saved") for r in (0, 1, 2))
        assert all(len(job.handler_calls(r, "stop")) == 1 for r in range(4))
        assert int(waited[0].split()[3]) >= 1000  # the save had about 1.7 s left when the fault came
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_fault_inside_a_save_abandons_it_at_once(tmp_path, job_env, monkeypatch):
    # Rank 3's own save fails: the save is collective, the others cannot finish it, nothing is waited for.
    monkeypatch.setenv("MINDIO_SAVE_WAIT_S", "20")
    job = Job(tmp_path, 4, fail_rank=3, save_ranks="0,1,2,3", save_s=30.0)
    try:
        job.wait_ready()
        job.fire()
        results = job.wait_results(range(4), timeout=20)
        assert all(r["result"] == "done" for r in results.values()), results
        waited = [d for _, _, d in job.controller_events("save_wait")]
        assert waited == ["ranks [0,1,2] are saving a checkpoint that cannot complete: faulted ranks [3] were in "
                          "the save; it is abandoned at once"], waited
        assert not any(job.events_of(r, "saved") for r in range(4))
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_rank_lost_after_another_finished_training_is_not_acted_on(tmp_path, job_env):
    job = Job(tmp_path, 4, finish_ranks="0,1,3", idle_s=8)
    try:
        job.wait_ready()
        job.fire()
        wait_until(lambda: job.controller_events("finished"), 5, "a rank's finished report")
        job.procs[2].send_signal(signal.SIGKILL)
        wait_until(lambda: job.controller_events("late_fault"), 3 * HEARTBEAT_S + 3, "rank 2's loss judged")
        late = [d for _, _, d in job.controller_events("late_fault")]
        assert late == ["rank 2 node: connection lost and not re-registered within one heartbeat period"], late
        assert not job.controller_events("decision") and not job.controller_events("fault")
        assert "stop" not in actions_in_order(job)
        assert {r: job.wait_results([r], timeout=15)[r]["result"] for r in (0, 1, 3)} == {0: "timeout", 1: "timeout",
                                                                                         3: "timeout"}
        flags = [entry["flags"] for entry in ctl.controller_ranks()]
        assert "finished" in flags[0] and "dead" in flags[2] and "finished" not in flags[2]
        # Rank 0 said goodbye on its way out; a process that then fails at its exit is not to be restarted.
        wait_until(lambda: any(d.startswith("rank 0:") for _, _, d in job.controller_events("left")), 10,
                   "rank 0's goodbye")
        contact = ControllerContact("127.0.0.1", job.port, os.environ.get("MINDIO_TOKEN", ""))
        answer = report_process_ended(contact, 0, job.procs[0].pid, "signal SIGABRT")
        assert answer.rank_had_left and "rank 0 had left the job before process" in answer.message, answer
        # Rank 2 died after the job completed, with no goodbye (killed on its way out): its launcher is told not
        # to start it again, which would wait for a job that is over (seen: five minutes, then a group restart).
        answer = report_process_ended(contact, 2, job.procs[2].pid, "signal SIGKILL")
        assert answer.rank_had_left and re.match(r"rank 2's process \d+ \(signal SIGKILL\) ended after the job "
                                                 r"completed \(rank \d finished training\): nothing to restart",
                                                 answer.message), answer
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
