"""core/layout/scale_in_plan: which ranks go on after a scale-in, at which sizes, and what is refused."""
import pytest

from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.scale_in_plan import ScaleInRefused, plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused, plan_scale_out


def test_dp4_losing_node_1_goes_on_at_dp2_with_twice_the_micro_batches():
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    plan = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    assert (plan.survivors, plan.dropped, plan.lost_dp_indices) == ((0, 1), (), (2, 3))
    assert (plan.old_dp, plan.new_dp, plan.num_microbatches) == (4, 2, 4)
    assert [plan.new_rank(r) for r in plan.survivors] == [0, 1]
    assert plan.describe().startswith("dp4 -> dp2")


def test_every_tp_rank_of_a_lost_data_parallel_index_leaves_and_survivors_are_renumbered_densely():
    # tp2 x dp4: DP lists [0,2,4,6] and [1,3,5,7]; rank 5 lost takes rank 4 (its TP peer) with it
    plan = plan_scale_in([[0, 2, 4, 6], [1, 3, 5, 7]], {5}, global_batch_size=12, micro_batch_size=1)
    assert plan.survivors == (0, 1, 2, 3, 6, 7) and plan.dropped == (4,) and plan.new_dp == 3
    assert [plan.new_rank(r) for r in (6, 7)] == [4, 5]
    with pytest.raises(ScaleInRefused, match="rank 4 does not survive"):
        plan.new_rank(4)


def test_a_size_that_does_not_divide_the_step_takes_the_uneven_split():
    plan = plan_scale_in([[0, 1, 2, 3]], {3}, global_batch_size=16, micro_batch_size=1)
    assert (plan.new_dp, plan.uneven, plan.split.counts(), plan.num_microbatches) == (3, True, (6, 5, 5), 6)
    assert plan.describe() == ("dp4 -> dp3 (data-parallel indices [3] lost a rank; survivors [0, 1, 2], 6, 5, 5 "
                               "micro-batches (uneven: each rank's loss weighted by its share))")
    even = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=1)
    assert not even.uneven and even.split.counts() == (8, 8) and "8 micro-batches each" in even.describe()


def test_a_global_batch_too_small_for_the_survivors_is_refused_naming_the_sizes():
    with pytest.raises(ScaleInRefused, match=r"cannot scale in from dp8 to dp6 with the global batch size 16: 4 "
                                             r"micro-batches per step leave some of dp6 without any"):
        plan_scale_in([list(range(8))], {6, 7}, global_batch_size=16, micro_batch_size=4)


def test_a_shard_whose_holders_are_all_gone_is_refused_naming_it():
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)  # shard 0 held by 0 and 2, shard 1 by 1 and 3
    with pytest.raises(ScaleInRefused, match=r"optimizer shard 0 of data-parallel list \[0, 1, 2, 3\] \(type 0\) "
                                             r"has no surviving holder \(held by \[0, 2\]\)"):
        plan_scale_in([[0, 1, 2, 3]], {0, 2}, global_batch_size=16, micro_batch_size=2, layout=layout)


def test_replicas_fall_to_the_most_that_divide_the_new_size():
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3, 4, 5]], 2)
    plan = plan_scale_in([[0, 1, 2, 3, 4, 5]], {5}, global_batch_size=10, micro_batch_size=1, layout=layout)
    assert (plan.new_dp, plan.old_replicas, plan.new_replicas) == (5, 2, 1)
    assert "R=2 -> R=1: the job has no replica now, its next fault ends in the dump" in plan.describe()
    layout = ReplicaLayout.from_dp_lists([list(range(8))], 4)
    plan = plan_scale_in([list(range(8))], {7, 6}, global_batch_size=12, micro_batch_size=1, layout=layout)
    assert (plan.new_dp, plan.new_replicas) == (6, 3) and plan.describe().endswith("R=4 -> R=3)")


def test_with_expert_parallelism_replicas_also_divide_the_new_expert_data_parallel_size():
    # dp4 R=2 EP2 losing node 1: dp2, expert data-parallel size 2 / 2 = 1, so R=1 (Megatron would refuse R=2)
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, expert_dp_lists=[[0, 2], [1, 3]])
    plan = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout,
                         expert_parallel=2)
    assert (plan.new_dp, plan.new_replicas) == (2, 1)
    dense_only = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2,
                               layout=ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2))
    assert dense_only.new_replicas == 2
    plan = plan_scale_in([list(range(8))], {6, 7}, global_batch_size=12, micro_batch_size=1,
                         layout=ReplicaLayout.from_dp_lists([list(range(8))], 4), expert_parallel=2)
    assert (plan.new_dp, plan.new_replicas) == (6, 3)  # dp6 / EP2 = 3: R=3 divides both


def test_tp2_dp2_losing_node_1_goes_on_at_dp1_without_replicas():
    # tp2 x dp2, R=2: DP lists [0,2] and [1,3], each rank holds its TP piece's whole optimizer state
    layout = ReplicaLayout.from_dp_lists([[0, 2], [1, 3]], 2)
    plan = plan_scale_in([[0, 2], [1, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    assert (plan.survivors, plan.dropped, plan.new_dp, plan.num_microbatches) == ((0, 1), (), 1, 8)
    assert (plan.old_replicas, plan.new_replicas) == (2, 1)
    plan = plan_scale_in([[0, 2], [1, 3]], {3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    assert plan.survivors == (0, 1) and plan.dropped == (2,)  # rank 3's TP peer leaves with it


def test_losing_every_data_parallel_index_or_an_unknown_rank_is_refused():
    with pytest.raises(ScaleInRefused, match="every data-parallel index"):
        plan_scale_in([[0, 1]], {0, 1}, global_batch_size=4, micro_batch_size=1)
    with pytest.raises(ScaleInRefused, match=r"lost ranks \[9\] are in no data-parallel rank list"):
        plan_scale_in([[0, 1]], {9}, global_batch_size=4, micro_batch_size=1)


def test_a_second_scale_in_is_one_plan_from_the_start_and_a_scale_out_takes_it_all_back():
    # dp4 R=2 loses ranks 2 and 3 (dp2, R=2), then the current rank 1 (start rank 1): dp1, R=1
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    first = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    second = plan_scale_in([[0, 1]], {1}, global_batch_size=16, micro_batch_size=2,
                           layout=ReplicaLayout.from_dp_lists([[0, 1]], 2))
    both = first.then(second)
    assert (both.lost, both.survivors, both.dropped, both.lost_dp_indices) == ((1, 2, 3), (0,), (), (1, 2, 3))
    assert (both.old_dp, both.new_dp, both.num_microbatches, both.old_replicas, both.new_replicas) == (4, 1, 8, 2, 1)
    assert both.describe().startswith("dp4 -> dp1 (data-parallel indices [1, 2, 3] lost a rank; survivors [0]")
    back = plan_scale_out(both, {1, 2, 3}, global_batch_size=16, micro_batch_size=2)
    assert (back.old_dp, back.new_dp, back.world_size, back.replicas, back.num_microbatches) == (1, 4, 4, 2, 2)
    with pytest.raises(ScaleOutRefused, match=r"retired, \[1, 2, 3\]"):
        plan_scale_out(both, {2, 3}, global_batch_size=16, micro_batch_size=2)


def test_a_second_scale_in_names_start_ranks_and_start_data_parallel_indices():
    # tp2 x dp4 (DP lists [0,2,4,6], [1,3,5,7]): rank 3 lost takes 2 (dp index 1); survivors 0,1,4,5,6,7 are
    # ranks 0..5 of the tp2 x dp3 job, whose DP lists are [0,2,4], [1,3,5]. There rank 5 (start rank 7) is lost
    # and takes rank 4 (start rank 6, start dp index 3) with it.
    first = plan_scale_in([[0, 2, 4, 6], [1, 3, 5, 7]], {3}, global_batch_size=12, micro_batch_size=1)
    second = plan_scale_in([[0, 2, 4], [1, 3, 5]], {5}, global_batch_size=12, micro_batch_size=1)
    both = first.then(second)
    assert (both.lost, both.dropped, both.survivors, both.lost_dp_indices) == ((3, 7), (2, 6), (0, 1, 4, 5), (1, 3))
    assert (both.old_dp, both.new_dp, both.num_microbatches) == (4, 2, 6)
    assert [both.new_rank(r) for r in (0, 1, 4, 5)] == [0, 1, 2, 3]
