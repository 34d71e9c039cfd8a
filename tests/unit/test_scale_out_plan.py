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
