"""stages/rebuild_groups, in a real two-process gloo world: the world is rebuilt under a new epoch each
time (numbered on, published for a replacement), Megatron's parallel state initialised again with the
recorded call, gradients dropped; the groups of before are matched to those of after by name."""
import pytest
import torch
import torch.distributed as dist

from recovery_fakes import FakeMegatron, action, marks, run_ranks, session_at
from mindio_adaptor.core.job import job_store
from mindio_adaptor.recovery.comm_rebuild import LAST_EPOCH
from mindio_adaptor.recovery.stages.rebuild_groups import RebuildError, old_to_new, rebuild_groups


def rebuild_twice(rank):
    session, megatron = session_at(3), FakeMegatron(rank=rank, world_size=2)
    session.thread.backend = "gloo"
    session.job.model_parallel_init = (("tp", 1), {"order": "tp-cp-ep-dp-pp"})
    session.job.model = ["chunk"]
    session.replacement.fake_world = True
    megatron.groups = {"_DATA_PARALLEL_GROUP": dist.new_group([0, 1])}
    old_dp = megatron.groups["_DATA_PARALLEL_GROUP"]
    facts = []
    for _ in range(2):
        rebuild_groups(session, megatron, action("clean", strategy="retry"))
        total = torch.ones(1)
        dist.all_reduce(total)  # the new world works
        dist.barrier()
        facts.append((session.next_comm_epoch, job_store.read_or(LAST_EPOCH, None), float(total)))
    return {"facts": facts, "fake_world": session.replacement.fake_world, "calls": megatron.names(),
            "init": megatron.called("reinitialize_parallel_state")[0],
            "new dp group": megatron.groups["_DATA_PARALLEL_GROUP"] is not old_dp, "marks": marks(session)}


def test_each_rebuild_takes_the_next_epoch_and_reinitialises_megatron():
    results = run_ranks(2, rebuild_twice)
    for rank in (0, 1):
        status, out = results[rank]
        assert status == "ok", out
        assert out["facts"] == [(2, 1, 2.0), (3, 2, 2.0)]
        assert out["fake_world"] is False  # a replacement's collectives are real from here on
        assert out["calls"] == ["reinitialize_parallel_state", "drop_gradients"] * 2
        assert out["init"] == ((("tp", 1), {"order": "tp-cp-ep-dp-pp"}), True)
        assert out["new dp group"] and out["marks"] == ["groups rebuilt", "groups rebuilt"]


def test_old_groups_map_to_the_new_ones_of_the_same_name():
    assert old_to_new({"A": "a0", "L": ["l0", "l1"]}, {"A": "a1", "L": ["m0", "m1"], "N": "n"}) == \
        {"a0": "a1", "l0": "m0", "l1": "m1"}


def test_a_group_that_disappears_in_the_rebuild_is_named():
    with pytest.raises(RebuildError, match="parallel_state._EXPERT_GROUP existed before the rebuild and not after"):
        old_to_new({"_EXPERT_GROUP": "e0"}, {})


def repair_online_five_times(rank):
    """An online repair (the retry flow, every process alive) after a stop shut the connections down."""
    import os

    from mindio_adaptor.core.communication import comm_abort

    session, megatron = session_at(3), FakeMegatron(rank=rank, world_size=2)
    session.thread.backend, session.flow = "gloo", "retry"
    session.job.model_parallel_init = (("tp", 1), {"order": "tp-cp-ep-dp-pp"})
    session.job.model = ["chunk"]
    megatron.groups = {"_DATA_PARALLEL_GROUP": dist.new_group([0, 1])}
    world, dp = dist.group.WORLD, megatron.groups["_DATA_PARALLEL_GROUP"]
    kept = []
    for _ in range(5):
        comm_abort.break_collectives("gloo", {int(os.environ["MASTER_PORT"])})
        rebuild_groups(session, megatron, action("clean", strategy="retry"))
        total = torch.ones(1)
        dist.all_reduce(total, group=megatron.groups["_DATA_PARALLEL_GROUP"])
        dist.all_reduce(total)
        kept.append((dist.group.WORLD is world, megatron.groups["_DATA_PARALLEL_GROUP"] is dp, float(total)))
    return {"kept": kept, "calls": megatron.names(),
            "epochs": (session.next_comm_epoch, job_store.read_or(LAST_EPOCH, None)),
            "reinits": session.comm_reinits_in_place, "marks": marks(session)}


def test_an_online_repair_keeps_the_group_objects_until_no_spare_backend_type_is_left():
    results = run_ranks(2, repair_online_five_times)
    for rank in (0, 1):
        status, out = results[rank]
        assert status == "ok", out
        # four times in place (the same objects, nothing for Megatron to redo), then a full rebuild
        assert out["kept"] == [(True, True, 4.0)] * 4 + [(False, False, 4.0)]
        assert out["calls"] == ["drop_gradients"] * 4 + ["reinitialize_parallel_state", "drop_gradients"]
        assert out["epochs"] == (6, 5) and out["reinits"] == 0  # a full rebuild frees the spare types
        assert out["marks"] == ["groups rebuilt"] * 5
