"""Which rank plays which data-parallel rank in the savers' group: placed by shard index from the
replica layout, with the tensor/pipeline coordinates of Megatron's rank order kept."""
from types import SimpleNamespace

import pytest

from mindio_adaptor.core import dump_world as dump
from mindio_adaptor.core.replica_layout import ReplicaLayout, ReplicaSet


def margs(tp=1, pp=1, dp=4, replicas=2, tp_pp_dp=False):
    return SimpleNamespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=1,
                           data_parallel_size=dp, num_distributed_optimizer_instances=replicas,
                           expert_model_parallel_size=1, use_tp_pp_dp_mapping=tp_pp_dp)


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
