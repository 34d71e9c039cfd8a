"""stages/scale_out_groups with the world rebuild played by the test (the real one is walked in
test_stage_rebuild_groups and end to end in tests/e2e/test_elastic_scale_in.py): a survivor of the scale-in takes
back its original rank, world and sizes before the world is rebuilt among every original rank, numbered from the
job's last epoch; a returned process keeps its sizes and leaves the fake backend; in a partial scale-out every rank
takes the sizes without the absent slices, and a returned rank of such a slice leaves again; the wrong ranks are
refused."""
import pytest

from recovery_fakes import FakeCommunicators, FakeMegatron, action, session_at
from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob
from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery.stages import scale_out_groups as stage

# tp2 x dp4 that lost rank 5 (and its TP peer 4): survivors 0,1,2,3,6,7 were ranks 0..5
SCALED_IN = plan_scale_in([[0, 2, 4, 6], [1, 3, 5, 7]], {5}, global_batch_size=12, micro_batch_size=1)


def session_with_fake_world(step):
    session = session_at(step)
    session.communicators = FakeCommunicators()
    return session


def test_a_survivor_takes_back_its_original_rank_and_sizes():
    megatron = FakeMegatron(rank=4, world_size=6, global_batch_size=12, micro_batch_size=1)
    session = session_with_fake_world(6)
    session.scale_in, session.job.model_parallel_init = SCALED_IN, ("init", {})
    assert stage.scale_out_groups(session, megatron, action("rebuild_group", error_ranks=(4, 5))) == 0
    # rank 4 was rank 6, and takes it back before the world is rebuilt among all eight ranks
    assert session.communicators.calls == ["epochs from the store", (6, 8, list(range(8)))]
    assert megatron.called("apply_original_sizes") == [(4,)]
    assert session.scale_in is None and session.scale_out.returned == (4, 5)
    assert megatron.called("reinitialize_parallel_state") == [(("init", {}), True)]


def test_a_returned_process_keeps_its_sizes_and_its_collectives_are_real():
    megatron, session = FakeMegatron(rank=5, world_size=8), session_with_fake_world(None)
    session.replacement.active = session.replacement.fake_world = True
    stage.scale_out_groups(session, megatron, action("rebuild_group", error_ranks=(4, 5)))
    assert session.communicators.calls == ["epochs from the store", (5, 8, list(range(8)))]
    assert megatron.called("apply_original_sizes") == []
    assert not session.replacement.fake_world and session.scale_out is None


def test_a_returned_process_not_named_or_a_survivor_of_no_scale_in_is_refused():
    returned = session_with_fake_world(None)
    returned.replacement.active = True
    with pytest.raises(ScaleOutRefused, match=r"returned process of rank 3 asked to join a scale-out that takes "
                                              r"back ranks \[4, 5\]"):
        stage.scale_out_groups(returned, FakeMegatron(rank=3, world_size=8),
                               action("rebuild_group", error_ranks=(4, 5)))
    never_scaled_in = session_with_fake_world(6)
    with pytest.raises(ScaleOutRefused, match="this rank never scaled in"):
        stage.scale_out_groups(never_scaled_in, FakeMegatron(rank=0, world_size=6, global_batch_size=12,
                                                             micro_batch_size=1),
                               action("rebuild_group", error_ranks=(4, 5)))
    assert returned.communicators.calls == never_scaled_in.communicators.calls == []


# dp4 scaled in to dp1 (ranks 1, 2 and 3 retired); rank 1 returned, 2 and 3 stay out: dp2 of ranks 0 and 1
TO_DP1 = plan_scale_in([[0, 1, 2, 3]], {1, 2, 3}, global_batch_size=16, micro_batch_size=2)


def returned_session(dp_lists=((0, 1, 2, 3),), replicas=2):
    session = session_with_fake_world(None)
    session.replacement.active = session.replacement.fake_world = True
    session.job.layout = ReplicaLayout.from_dp_lists([list(ranks) for ranks in dp_lists], replicas)
    return session


def test_a_partial_scale_out_takes_every_rank_to_the_size_without_the_absent_slices():
    survivor = FakeMegatron(rank=0, world_size=1, global_batch_size=16, micro_batch_size=2)
    session = session_with_fake_world(6)
    session.scale_in, session.job.model_parallel_init = TO_DP1, ("init", {})
    stage.scale_out_groups(session, survivor, action("rebuild_group", error_ranks=(1,), absent_ranks=(2, 3)))
    assert session.communicators.calls == ["epochs from the store", (0, 4, [0, 1])]
    assert survivor.called("apply_scale_in_sizes") == [(2, 0)]
    assert (survivor.margs.rank, survivor.margs.world_size) == (0, 2)
    assert session.scale_in.survivors == (0, 1) and session.scale_out.partial

    returned = FakeMegatron(rank=1, world_size=4, global_batch_size=16, micro_batch_size=2)
    session = returned_session()
    stage.scale_out_groups(session, returned, action("rebuild_group", error_ranks=(1,), absent_ranks=(2, 3)))
    assert session.communicators.calls == ["epochs from the store", (1, 4, [0, 1])]
    assert returned.called("apply_scale_in_sizes") == [(2, 1)]
    assert (returned.margs.rank, returned.margs.world_size) == (1, 2)
    assert session.scale_in.survivors == (0, 1) and session.scale_out is None and not session.replacement.fake_world


def test_a_returned_rank_whose_slice_has_an_absent_rank_leaves_again():
    # tp2 x dp2 (DP lists [0, 2], [1, 3]) scaled in to dp1; ranks 2 and 3 retired, only 3 returned
    session = returned_session(dp_lists=((0, 2), (1, 3)), replicas=1)
    with pytest.raises(LeavingTheJob, match=r"returned rank 3 leaves the job again at .*: its data-parallel slice "
                                            r"has a rank that stays out \(absent ranks \[2\]\); the job goes on "
                                            r"without it, dp2 -> dp1 \(data-parallel indices \[1\] lost a rank"):
        stage.scale_out_groups(session, FakeMegatron(rank=3, world_size=4, global_batch_size=4, micro_batch_size=1),
                               action("rebuild_group", error_ranks=(3,), absent_ranks=(2,)))
    assert session.communicators.calls == []
