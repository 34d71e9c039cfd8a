"""Which rank plays which data-parallel rank in the savers' group: placed by shard index from the
replica layout, with the tensor/pipeline coordinates of Megatron's rank order kept."""
from types import SimpleNamespace

import pytest

from mindio_adaptor.core.layout import dump_world as dump
from mindio_adaptor.core.layout.replica_layout import ReplicaLayout, ReplicaSet


def margs(tp=1, pp=1, dp=4, replicas=2, tp_pp_dp=False, ep=1, etp=None, cp=1):
    return SimpleNamespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
                           data_parallel_size=dp, num_distributed_optimizer_instances=replicas,
                           expert_model_parallel_size=ep, expert_tensor_parallel_size=etp or tp,
                           use_tp_pp_dp_mapping=tp_pp_dp)


def layout(dp_lists, replicas=2):
    return ReplicaLayout.from_dp_lists(dp_lists, replicas)


def test_dp4_savers_take_the_dp_rank_of_their_shard():
    dp4 = layout([[0, 1, 2, 3]])  # instances (0, 1) and (2, 3): shard 0 on 0 and 2, shard 1 on 1 and 3
    assert dump.dump_world([0, 3], margs(), dp4) == [0, 3]
    assert dump.dump_world([2, 1], margs(), dp4) == [2, 1]


def test_a_layout_whose_shard_order_is_not_the_rank_order():
    # anti-affinity re-laid instances (0, 2) and (1, 3): rank 2 holds shard 1, rank 1 holds shard 0
    relaid = ReplicaLayout([ReplicaSet([0, 2, 1, 3], 2)])
    assert dump.dump_world([1, 2], margs(), relaid) == [1, 2]
    assert dump.dump_world([2, 1], margs(), relaid) == [1, 2]  # never the order of the list received


def test_tp2_keeps_tensor_coordinates():
    # 8 ranks, TP=2: DP lists [0, 2, 4, 6] and [1, 3, 5, 7]; savers for shard 0 and 1 of each
    tp2 = layout([[0, 2, 4, 6], [1, 3, 5, 7]])
    assert dump.dump_world([4, 2, 1, 7], margs(tp=2), tp2) == [4, 1, 2, 7]


def test_savers_that_miss_a_position_are_refused():
    with pytest.raises(dump.DumpError, match="without a saver"):
        dump.dump_world([0], margs(), layout([[0, 1, 2, 3]]))


def test_two_savers_of_one_shard_are_refused():
    with pytest.raises(dump.DumpError, match="both hold shard 0"):
        dump.dump_world([0, 2, 1], margs(), layout([[0, 1, 2, 3]]))


def moe_dp4_ep2():
    """dp4 R=2 EP=2 (Megatron's groups on one host): dense instances (0, 1), (2, 3); expert data-parallel
    lists (0, 2) for expert-parallel rank 0 and (1, 3) for rank 1, one shard each, R=2."""
    return ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, expert_dp_lists=[[0, 2], [1, 3]])


def test_moe_savers_of_either_instance_hold_the_expert_shard_of_their_place():
    # Rank 3 saves dense shard 1 (instance 1): its place 1 has expert-parallel rank 1, which it holds.
    assert dump.dump_world([0, 3], margs(ep=2), moe_dp4_ep2()) == [0, 3]
    assert dump.dump_world([2, 1], margs(ep=2), moe_dp4_ep2()) == [2, 1]


def test_moe_layouts_the_savers_world_cannot_hold_are_refused():
    with pytest.raises(dump.DumpError, match="the expert-parallel size 4 does not divide the 2 dense shards"):
        dump.dump_world([0, 1], margs(ep=4), moe_dp4_ep2())
    with pytest.raises(dump.DumpError, match="the expert tensor-parallel size 1 differs from the tensor-parallel "
                                             "size 2"):
        dump.dump_world([0, 1], margs(tp=2, dp=2, ep=2, etp=1), moe_dp4_ep2())
    with pytest.raises(dump.DumpError, match=r"context parallelism \(2\) with expert parallelism"):
        dump.dump_world([0, 1], margs(ep=2, cp=2), moe_dp4_ep2())


def test_a_saver_whose_expert_shard_is_not_that_of_its_place_is_refused():
    # Expert shards not cut as the dense instances are (one replica, two shards): rank 3 holds expert-parallel
    # rank 1's shard 1, where its place takes shard 0
    relaid = ReplicaLayout([ReplicaSet([0, 1, 2, 3], 2), ReplicaSet([0, 2], 2, optimizer_type=1, group_index=0),
                            ReplicaSet([1, 3], 1, optimizer_type=1, group_index=1)])
    with pytest.raises(dump.DumpError, match=r"saver 3 holds expert-parallel rank 1, expert shard 1, but its place "
                                             r"1 in the savers' world takes expert-parallel rank 1, expert shard 0"):
        dump.dump_world([0, 3], margs(ep=2), relaid)
