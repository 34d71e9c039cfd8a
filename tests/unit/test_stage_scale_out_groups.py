"""stages/scale_out_groups with the world rebuild played by the test (the real one is walked in
test_stage_rebuild_groups and end to end in tests/e2e/test_elastic_scale_in.py): a survivor of the scale-in takes
back its original rank, world and sizes before the world is rebuilt among every original rank, numbered from the
job's last epoch; a returned process keeps its sizes and leaves the fake backend; the wrong ranks are refused."""
import pytest

from recovery_fakes import FakeCommunicators, FakeMegatron, action, session_at
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
