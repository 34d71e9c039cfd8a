"""stages/scale_out_state: every rank of the original size loads the checkpoint the survivors saved at the
smaller size into a model and optimizer built again (megatron/rebuild); the
session's snapshot and the data position follow it; a returned process counts as joined (ROLLBACK then
expects no state from a replica peer); rank 0 of a survivor logs the scale-out once."""
import logging
from types import SimpleNamespace

import pytest

from recovery_fakes import FakeMegatron, FakeReplay, action, session_at
from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig
from mindio_adaptor.core.layout.scale_in_plan import plan_scale_in
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused, plan_scale_out
from mindio_adaptor.recovery.stages.scale_out_state import SCALE_OUT_STATE, scale_out_state

SCALED_IN = plan_scale_in([[0, 1, 2, 3]], {2, 3}, global_batch_size=16, micro_batch_size=2)
PLAN = plan_scale_out(SCALED_IN, [2, 3], global_batch_size=16, micro_batch_size=2)

# The job's resizes take the state from the checkpoint (--elastic-scale-out-from checkpoint).
FROM_CHECKPOINT = HighAvailabilityConfig(elastic_scale_out_from="checkpoint")


def from_checkpoint(**args) -> FakeMegatron:
    """Megatron as the stage sees it, whose rebuild loads step 6 of the checkpoint."""
    megatron = FakeMegatron(**args)
    megatron.rebuilt = (6, 600.0)
    return megatron


def test_a_survivor_loads_at_the_original_size_and_rank_0_says_so(caplog):
    session = session_at(6, save_root="/ckpt", config=FROM_CHECKPOINT)
    megatron = from_checkpoint(global_batch_size=16, world_size=4)
    session.scale_out = PLAN
    megatron.margs.consumed_train_samples = 96
    replay = FakeReplay()
    session.replay.iterators[1] = replay
    with caplog.at_level(logging.INFO):
        assert scale_out_state(session, megatron, action("repair", strategy="scale_out", step=6)) == 0
    assert megatron.called("rebuild") == [("/ckpt", 6)] and replay.restarts == [(96, 6)]
    assert (session.latest.iteration, session.latest.consumed_train_samples) == (6, 96)
    [said] = [r.getMessage() for r in caplog.records if "elastic training: scaled out" in r.getMessage()]
    assert said.startswith("elastic training: scaled out dp2 -> dp4 (ranks [2, 3] returned; 2 micro-batches each) "
                           "after step 6 at ") and "training goes on from sample 96" in said
    assert "(state loaded in " in said
    assert SCALE_OUT_STATE.on_training_thread


def test_a_returned_process_takes_its_state_from_the_checkpoint_and_counts_as_joined(caplog):
    session = session_at(None, save_root="/ckpt", config=FROM_CHECKPOINT)
    megatron = from_checkpoint(rank=2, world_size=4)
    megatron.margs.consumed_train_samples = 96
    session.replacement.active = True
    session.replacement.train_data_iterator = holder = SimpleNamespace(iterable=iter(range(100)))
    with caplog.at_level(logging.INFO):
        scale_out_state(session, megatron, action("repair", strategy="scale_out", step=6))
    assert not session.replacement.awaiting_state and session.replacement.joined_at == 6
    assert not session.is_behind(6)
    assert next(holder.iterable) == 96  # its data loader, built at sample 0, starts at the checkpoint's sample
    assert not [r for r in caplog.records if "elastic training" in r.getMessage()]


def test_another_step_loaded_or_no_save_directory_is_refused():
    with pytest.raises(ScaleOutRefused, match="scale out from the checkpoint of step 5 under /ckpt; loaded step 6"):
        scale_out_state(session_at(6, save_root="/ckpt", config=FROM_CHECKPOINT), from_checkpoint(),
                        action("repair", step=5))
    with pytest.raises(ScaleOutRefused, match="no --save directory"):
        scale_out_state(session_at(6, config=FROM_CHECKPOINT), from_checkpoint(), action("repair", step=6))
