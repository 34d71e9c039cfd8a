"""core/layout/scale_out_plan: the way back from a scale-in once the ranks it retired return, and what is refused."""
import pytest

from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused, plan_scale_out


def test_dp2_grows_back_to_dp4_with_the_original_micro_batches_and_ranks():
    scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    plan = plan_scale_out(scale_in, [3, 2], global_batch_size=16, micro_batch_size=2)
    assert (plan.returned, plan.survivors, plan.old_dp, plan.new_dp) == ((2, 3), (0, 1), 2, 4)
    assert (plan.world_size, plan.num_microbatches) == (4, 2)
    assert [plan.original_rank(r) for r in (0, 1)] == [0, 1]
    assert plan.describe() == "dp2 -> dp4 (ranks [2, 3] returned; 2 micro-batches each)"


def test_survivors_renumbered_by_the_scale_in_take_back_their_original_ranks():
    # tp2 x dp4, rank 5 lost with its TP peer 4: survivors 0,1,2,3,6,7 were ranks 0..5
    scale_in = plan_scale_in([[0, 2, 4, 6], [1, 3, 5, 7]], {5}, global_batch_size=12, micro_batch_size=1)
    plan = plan_scale_out(scale_in, {4, 5}, global_batch_size=12, micro_batch_size=1)
    assert [plan.original_rank(r) for r in range(6)] == [0, 1, 2, 3, 6, 7]
    assert (plan.world_size, plan.old_dp, plan.new_dp, plan.num_microbatches) == (8, 3, 4, 3)
    with pytest.raises(ScaleOutRefused, match="rank 6 is no rank of the scaled-in job"):
        plan.original_rank(6)


def test_tp2_dp2_back_from_dp1_has_its_two_optimizer_replicas_again():
    # one data-parallel slice per node: ranks 2 and 3 lost, the scale-in left R=1 at dp1
    dp_lists = [[0, 2], [1, 3]]
    scale_in = plan_scale_in(dp_lists, {2, 3}, global_batch_size=16, micro_batch_size=2,
                             layout=ReplicaLayout.from_dp_lists(dp_lists, 2))
    assert (scale_in.old_replicas, scale_in.new_replicas) == (2, 1)
    plan = plan_scale_out(scale_in, {2, 3}, global_batch_size=16, micro_batch_size=2)
    assert (plan.old_replicas, plan.replicas, plan.old_dp, plan.new_dp, plan.num_microbatches) == (1, 2, 1, 2, 4)
    assert [plan.original_rank(r) for r in (0, 1)] == [0, 1]
    assert plan.describe() == ("dp1 -> dp2 (ranks [2, 3] returned; 4 micro-batches each; optimizer replicas "
                               "R=1 -> R=2)")


def test_a_partial_return_is_refused_naming_the_retired_ranks():
    scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    with pytest.raises(ScaleOutRefused, match=r"every rank the scale-in \(dp4 -> dp2 .*\) retired, \[2, 3\]; the "
                                              r"controller names \[2\]"):
        plan_scale_out(scale_in, [2], global_batch_size=16, micro_batch_size=2)


def test_a_global_batch_the_original_size_cannot_share_is_refused():
    scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    with pytest.raises(ScaleOutRefused, match=r"global batch size 12 is not a multiple of micro-batch size 2 x dp4"):
        plan_scale_out(scale_in, [2, 3], global_batch_size=12, micro_batch_size=2)


def twice_scaled_in_dp4():
    """dp4 R=2 scaled in twice: ranks 2 and 3 lost (dp2), then rank 1 (dp1, R=1), one plan from the start."""
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    first = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2, layout=layout)
    second = plan_scale_in([[0, 1]], {1}, global_batch_size=16, micro_batch_size=2,
                           layout=ReplicaLayout.from_dp_lists([[0, 1]], 2))
    return first.then(second)


def test_part_of_the_way_back_is_the_plan_from_the_start_without_the_absent_slices():
    plan = plan_scale_out(twice_scaled_in_dp4(), {1}, global_batch_size=16, micro_batch_size=2, absent={2, 3})
    assert plan.partial and not plan.refused
    assert (plan.returned, plan.survivors, plan.old_dp, plan.new_dp, plan.world_size) == ((1,), (0,), 1, 2, 4)
    assert (plan.old_replicas, plan.replicas, plan.num_microbatches) == (1, 2, 4)
    target = plan.target
    assert (target.survivors, target.lost, target.dropped, target.old_dp, target.new_dp) == ((0, 1), (2, 3), (), 4, 2)
    assert target.start_dp_lists == ((0, 1, 2, 3),)
    assert [target.new_rank(r) for r in (0, 1)] == [0, 1]
    assert plan.describe() == ("dp1 -> dp2 of dp4 (ranks [1] returned; ranks [2, 3] stay out; 4 micro-batches each; "
                               "optimizer replicas R=1 -> R=2)")
    # the rest later: the whole way back from the partial plan
    back = plan_scale_out(target, {2, 3}, global_batch_size=16, micro_batch_size=2)
    assert (back.survivors, back.old_dp, back.new_dp, back.replicas, back.num_microbatches) == ((0, 1), 2, 4, 2, 2)


def test_a_returned_rank_whose_slice_has_an_absent_rank_stays_out():
    # tp2 x dp4 (DP lists [0,2,4,6], [1,3,5,7]) lost ranks 4 and 7 with their TP peers: dp2 with ranks 0,1,2,3.
    # Ranks 5, 6 and 7 returned, 4 did not: slice 3 (6, 7) joins, rank 5 (slice 2, with absent 4) stays out.
    scale_in = plan_scale_in([[0, 2, 4, 6], [1, 3, 5, 7]], {4, 7}, global_batch_size=12, micro_batch_size=1)
    plan = plan_scale_out(scale_in, {5, 6, 7}, global_batch_size=12, micro_batch_size=1, absent={4})
    assert (plan.returned, plan.old_dp, plan.new_dp, plan.world_size) == ((6, 7), 2, 3, 8)
    assert (plan.target.survivors, plan.target.lost, plan.target.dropped) == ((0, 1, 2, 3, 6, 7), (4,), (5,))
    assert [plan.target.new_rank(r) for r in (0, 1, 2, 3, 6, 7)] == [0, 1, 2, 3, 4, 5]
    assert plan.describe().startswith("dp2 -> dp3 of dp4 (ranks [6, 7] returned; ranks [4, 5] stay out; ")


def test_a_partial_size_with_uneven_shares_keeps_the_global_batch():
    # dp4 scaled in to dp1; ranks 1 and 2 return, 3 does not: dp3, whose 8 micro-batches split 3, 3, 2
    scale_in = plan_scale_in([[0, 1, 2, 3]], {1, 2, 3}, global_batch_size=16, micro_batch_size=2)
    plan = plan_scale_out(scale_in, {1, 2}, global_batch_size=16, micro_batch_size=2, absent={3})
    assert (plan.new_dp, plan.target.uneven, plan.target.split.microbatches(0)) == (3, True, 3)
    assert "stay out; " in plan.describe()


def test_where_the_experts_cannot_sit_at_the_partial_size_nobody_joins():
    # EP 2: dp4 scaled in to dp2 without ranks 2 and 3; rank 2 alone back would make dp3, no multiple of 2
    scale_in = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
    plan = plan_scale_out(scale_in, {2}, global_batch_size=16, micro_batch_size=2, absent={3}, expert_parallel=2)
    assert plan.refused.startswith("scale-in to dp3 with expert-parallel size 2")
    assert (plan.returned, plan.old_dp, plan.new_dp) == ((), 2, 2)
    assert (plan.target.survivors, plan.target.lost, plan.target.new_dp) == ((0, 1), (2, 3), 2)


@pytest.mark.parametrize("returned, absent", [({1}, {2}), ({1, 2}, {2, 3}), ({1, 5}, {2, 3})])
def test_a_partial_scale_out_must_name_every_retired_rank_once(returned, absent):
    with pytest.raises(ScaleOutRefused, match=r"names every rank the scale-in .* retired, \[1, 2, 3\], once"):
        plan_scale_out(twice_scaled_in_dp4(), returned, global_batch_size=16, micro_batch_size=2, absent=absent)
