"""The reference's client contract over a real controller and real processor processes (client_worker.py,
written the way MindSpeed-LLM calls the reference API): the handlers' argument shapes, the per-rank
repair info of a repair between two ranks, a fault inside an optimizer update, and a dump asked for
by the cluster manager's controller face."""
import json
from pathlib import Path

import pytest

from controller_harness import Job, actions_in_order, wait_until
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration

CLIENT_WORKER = Path(__file__).with_name("client_worker.py")
# What every handler received as `args`: the decorated tft_train(train_args, test_data_iterator_list)
# call's arguments as one list, train_args (8 entries, the client's layout) being the caller's own list.
CLIENT_ARGS = {"type": "list", "len": 2, "train_len": 8, "same_list": True}
WORLD = 4  # DP [0..3], two replicas: rank r's shard is also held by rank (r + 2) % 4


def client_job(tmp_path, **worker_args):
    return Job(tmp_path, WORLD, worker=CLIENT_WORKER, **worker_args)


def calls(job, rank, handler):
    return [e for e in job.events_of(rank, "handler") if e["handler"] == handler]


def strip(call):
    return {k: v for k, v in call.items() if k not in ("rank", "handler", "args_shape")}


def assert_repaired_and_trained_on(job, results, repaired):
    for rank, result in results.items():
        assert result["result"] == "done" and result["repair_type"] == "retry", (rank, result)
        assert result["step"] == 7 and result["value"] == result["digest"], (rank, result)  # the uninterrupted digest
    assert results[repaired]["model"] == {"model": repaired, "rebuilt": True}  # the handler's assignment was kept
    assert all(results[r]["model"] == {"model": r} for r in results if r != repaired)


@pytest.mark.parametrize("fail_mode", ["idle", "mid-update"])
def test_a_repair_between_two_ranks_gives_each_its_own_pairs(tmp_path, job_env, fail_mode):
    job = client_job(tmp_path, fail_rank=1, fail_mode=fail_mode)
    try:
        job.wait_ready()
        # mid-update: rank 1 fails inside its update of step 5 (its optimizer still holds step 4)
        assert job.events_of(1, "ready")[0]["ready"] == (4 if fail_mode == "mid-update" else 5)
        job.fire()
        results = job.wait_results(range(WORLD))
        assert actions_in_order(job) == ["prelock", "stop", "clean", "repair", "rollback", "normal"]
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[3] dst=[1]"]
        [send] = calls(job, 3, "repair")
        [receive] = calls(job, 1, "repair")
        info = {"type": [0], "src": [3], "dst": [1], "rank_list": [1, 3]}
        assert strip(send) == {"step": 5, "need_rebuild": False, "error_ranks": [1], "info": dict(info, repair_type=0)}
        assert strip(receive) == {"step": 5, "need_rebuild": True, "error_ranks": [1],
                                  "info": dict(info, repair_type=1)}  # UCE_HIGHLEVEL: the client rebuilds first
        assert not calls(job, 0, "repair") and not calls(job, 2, "repair")
        for rank in range(WORLD):
            assert [strip(c) for c in calls(job, rank, "rollback")] == [{"step": 5, "optimizer_step": 5}], rank
            for handler in ("stop", "clean", "repair", "rollback"):
                assert all(c["args_shape"] == CLIENT_ARGS for c in calls(job, rank, handler)), (rank, handler)
        assert_repaired_and_trained_on(job, results, repaired=1)
        assert all(p.wait(timeout=10) == 0 for p in job.procs.values())
        # the decorated train() returned: each processor left on purpose (destroyed at the normal end)
        wait_until(lambda: len(job.controller_events("left")) == WORLD, 10, "every rank to leave")
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()


def test_a_dump_asked_for_by_the_cluster_manager_hands_the_savers_the_train_arguments(tmp_path, job_env):
    job = client_job(tmp_path)
    try:
        job.wait_ready()
        assert ctl.tft_notify_controller_dump() == 0
        wait_until(lambda: all(calls(job, r, "exit") for r in range(WORLD)), 15, "EXIT on every rank")
        savers = [r for r in range(WORLD) if calls(job, r, "save_ckpt")]
        assert len(savers) == 2 and {r % 2 for r in savers} == {0, 1}, savers  # one holder of each shard
        for rank in savers:
            [save] = calls(job, rank, "save_ckpt")
            assert save["step"] == 5 and save["args_shape"] == CLIENT_ARGS
            assert save["save_info"] == [{"type": 0, "ranks": sorted(savers)}], save
            dumped = json.loads((tmp_path / "exchange" / f"dump-{rank}.json").read_text())
            assert dumped["step"] == 5
        renames = {r: calls(job, r, "rename") for r in range(WORLD) if calls(job, r, "rename")}
        assert len(renames) == 1 and set(renames) <= set(savers), renames  # one saver renames the dump
        [[rename]] = renames.values()
        assert rename["step"] == 5 and rename["args_shape"] == CLIENT_ARGS
        for rank in range(WORLD):  # stopped (FORCE STOP, reported NORMAL), then told to exit
            assert [c["args_shape"] for c in calls(job, rank, "stop")] == [CLIENT_ARGS], rank
        results = job.wait_results(range(WORLD))
        assert all(r["result"] == "exit" for r in results.values()), results
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
