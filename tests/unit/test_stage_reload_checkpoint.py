"""stages/reload_checkpoint: every rank loads the named periodic checkpoint again online; the session's
snapshot, the data position and the replay follow it."""
import pytest

from recovery_fakes import FakeMegatron, FakeReplay, action, session_at
from mindio_adaptor.core.detection.enums import RepairType
from mindio_adaptor.core.job.processor_link import RepairAssignment
from mindio_adaptor.recovery.stages.reload_checkpoint import RELOAD_CHECKPOINT, reload_checkpoint


def repair(step):
    return action("repair", strategy="retry", step=step,
                  repair=RepairAssignment(RepairType.LOAD_CKPT))


def test_reload_takes_the_checkpoints_step_as_the_last_completed_one():
    session, megatron = session_at(7), FakeMegatron(save="/ckpt")
    megatron.loaded = (4, 400.0)
    megatron.margs.consumed_train_samples = 32  # what the load set
    replay = FakeReplay()
    session.replay.iterators[1] = replay
    assert reload_checkpoint(session, megatron, repair(4)) == 0
    assert megatron.called("load_checkpoint_of_step") == [(4,)]
    assert (session.latest.iteration, session.latest.consumed_train_samples,
            session.latest.floating_point_operations) == (4, 32, 400.0)
    assert (megatron.margs.iteration, megatron.margs.num_floating_point_operations_so_far) == (4, 400.0)
    assert session.job.completed_steps == [4]
    assert replay.restarts == [(32, 4)]  # the iterator starts again at the checkpoint's sample
    assert RELOAD_CHECKPOINT.on_training_thread


def test_a_run_without_save_is_refused():
    with pytest.raises(RuntimeError, match="reload the checkpoint of step 4, but this run saves none"):
        reload_checkpoint(session_at(7), FakeMegatron(save=None), repair(4))


def test_a_checkpoint_of_another_step_is_refused():
    megatron = FakeMegatron(save="/ckpt")
    megatron.loaded = (3, 300.0)
    session = session_at(7)
    with pytest.raises(RuntimeError, match="asked to reload the checkpoint of step 4 from /ckpt; loaded step 3"):
        reload_checkpoint(session, megatron, repair(4))
    assert session.latest.iteration == 7
