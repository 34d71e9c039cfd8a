"""stages/save_repair_step: the periodic checkpoint of the repair step where the fault kept Megatron from writing
it, decided alike on every rank from the step, --save-interval and the tracker; saved by every rank of a real gloo
world and published by rank 0."""
from recovery_fakes import FakeMegatron, action, marks, run_ranks, session_at
from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.recovery.stages.save_repair_step import SAVE_REPAIR_STEP, periodic_save_owed, save_repair_step


def test_owed_only_at_a_multiple_of_the_interval_that_the_tracker_does_not_name(tmp_path):
    root = str(tmp_path)
    assert periodic_save_owed(4, root, 2)
    assert not periodic_save_owed(5, root, 2)  # not a save step
    assert not periodic_save_owed(4, None, 2) and not periodic_save_owed(4, "", 2)  # no --save
    assert not periodic_save_owed(4, root, None) and not periodic_save_owed(4, root, 0)  # no --save-interval
    assert not periodic_save_owed(0, root, 2)
    dump_dir.write_tracker(root, 2)
    assert periodic_save_owed(4, root, 2)  # the tracker names the save before: step 4's was lost
    dump_dir.write_tracker(root, 4)
    assert not periodic_save_owed(4, root, 2)  # saved before the fault


def test_a_step_not_owed_saves_nothing(tmp_path):
    megatron = FakeMegatron(save=str(tmp_path), save_interval=2, world_size=2)
    assert save_repair_step(session_at(5, save_root=str(tmp_path)), megatron, action("rollback", step=5)) == 0
    assert megatron.calls == [] and not list(tmp_path.iterdir())
    assert SAVE_REPAIR_STEP.on_training_thread


def _save_step_4(rank, root):
    megatron = FakeMegatron(rank=rank, world_size=2, save=root, save_interval=2)
    session = session_at(4, save_root=root)
    result = save_repair_step(session, megatron, action("rollback", strategy="recover", step=4))
    return result, megatron.calls, marks(session)


def test_every_rank_saves_into_staging_and_rank_0_publishes(tmp_path):
    root = str(tmp_path)
    dump_dir.write_tracker(root, 2)
    results = run_ranks(2, _save_step_4, root)
    for rank in (0, 1):
        status, value = results[rank]
        assert status == "ok", value
        result, calls, marked = value
        assert result == 0
        assert calls == [("set_data_position", 4), ("save_checkpoint_for_full_job", 4, 400.0, [0, 1], 2)]
        assert marked == ["repair step saved"]
    assert sorted(p.name for p in (tmp_path / "iter_0000004").iterdir()) == ["rank0.pt", "rank1.pt"]
    assert dump_dir.tracked_step(root) == 4
    assert not dump_dir.staging_root(root, 4).exists()
