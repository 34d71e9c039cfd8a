"""PRELOCK with real processor processes: after a fault the controller locks the repair step; a rank
mid-update may finish it and then serves as a peer, a rank that starts a new update is force-stopped,
and a laggard that never finishes within the prelock wait is excluded from saving."""
import signal

import pytest

from controller_harness import HEARTBEAT_S, Job, actions_in_order, wait_until

pytestmark = pytest.mark.integration


def test_rank_mid_update_finishes_within_the_wait_and_is_a_valid_peer(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_PRELOCK_TIMEOUT", "5")
    # Rank 7 holds the other copy of rank 3's shard; it is mid-update of step 5 when rank 3 fails.
    job = Job(tmp_path, 8, fail_rank=3, lag_rank=7, lag_mode="finish")
    try:
        job.wait_ready()
        assert job.events_of(7, "ready")[0]["ready"] == 4
        job.fire()
        results = job.wait_results(range(8))
        assert all(r["result"] == "done" and r["repair_type"] == "retry" for r in results.values()), results
        assert job.events_of(7, "prelock")[0]["prelock"] == 5
        assert job.events_of(7, "finished")[0]["finished"] == 5
        assert [d for _, _, d in job.controller_events("prelock_wait")] == ["step 5 laggards [7]"]
        assert job.controller_events("prelock_done")
        assert not job.controller_events("prelock_timeout")
        assert actions_in_order(job) == ["prelock", "stop", "clean", "repair", "rollback", "normal"]
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[7] dst=[3]"]
        assert job.handler_calls(7, "repair")[0][3]["repair_type"] == 0  # rank 7 sends
        assert all(job.handler_calls(r, "rollback") == [[5]] for r in range(8))
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_start_updating_after_the_lock_raises_force_stop(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_PRELOCK_TIMEOUT", "0.3")
    monkeypatch.setenv("MINDIO_PRELOCK_TRIES", "2")
    # Rank 6 is one step behind and starts step 5 after the lock: it blocks until STOP. Rank 0 has
    # completed the lock step and starts step 6: refused at once.
    job = Job(tmp_path, 8, fail_rank=3, lag_rank=6, lag_mode="start", start_rank=0)
    try:
        job.wait_ready()
        job.fire()
        results = job.wait_results(range(8))
        assert all(r["result"] == "done" for r in results.values()), results
        for rank in (0, 6):
            assert len(job.events_of(rank, "start_error")) == 1, job.events_of(rank)
            [error] = job.events_of(rank, "start_error")
            assert "FORCE STOP" in error["start_error"] and "prelock at step 5" in error["start_error"], error
        assert job.events_of(0, "start_error")[0]["blocked_s"] < 0.5
        assert "stopped after" in job.events_of(6, "start_error")[0]["start_error"]
        assert not job.events_of(0, "started") and not job.events_of(6, "started")
        # Rank 6 stayed behind: repaired from its peer like a corrupted rank.
        assert [d for _, _, d in job.controller_events("prelock_timeout")] == ["try 1/2 laggards [6]",
                                                                               "try 2/2 laggards [6]"]
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[7,2] dst=[3,6]"]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_laggard_that_never_finishes_is_excluded_from_saving(tmp_path, job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_PRELOCK_TIMEOUT", "0.2")
    monkeypatch.setenv("MINDIO_PRELOCK_TRIES", "2")
    job = Job(tmp_path, 8, lag_rank=2, lag_mode="never")
    try:
        job.wait_ready()
        job.fire()
        job.procs[5].send_signal(signal.SIGKILL)
        live = [r for r in range(8) if r != 5]
        results = job.wait_results(live)
        assert all(r["result"] == "exit" for r in results.values())
        assert len(job.controller_events("prelock_timeout")) == 2
        # DP [0..7], R=2, rank 5 dead, rank 2 still mid-update of step 5: shard 2 falls to rank 6.
        assert [d for _, _, d in job.controller_events("savers")] == ["type 0 step 5 [0,1,3,6]"]
        assert [r for r in live if job.handler_calls(r, "save_ckpt")] == [0, 1, 3, 6]
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
