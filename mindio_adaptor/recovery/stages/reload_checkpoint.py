"""REPAIR by reloading the last periodic checkpoint (the reference's LOAD_CKPT), when no live replica
holds a faulty rank's optimizer shard (R=1, --distributed-optimizer-no-replica, or every holder faulty).

Every rank (all alive, its groups rebuilt at CLEAN) loads the checkpoint of the step the controller
names again with Megatron's own load_checkpoint: model, optimizer, scheduler, RNG, data position.
ROLLBACK then takes every rank to that step and the training threads enter Megatron's train loop
again there (patches/train_reentry); the steps since the checkpoint are computed again. No process
restarts. Which steps can be reloaded: patches/saved_step_reports."""
import logging
import time

from mindio_adaptor.core.steps.step_snapshot import StepSnapshot
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def reload_checkpoint(session, megatron, action) -> int:
    started, step, job = time.monotonic(), action.step, session.job
    margs = megatron.args()
    if not margs.save:
        raise RuntimeError(f"asked to reload the checkpoint of step {step}, but this run saves none (--save)")
    iteration, flops = megatron.load_checkpoint_of_step(job.model, job.optimizer, job.scheduler, step)
    if iteration != step:
        raise RuntimeError(f"asked to reload the checkpoint of step {step} from {margs.save}; loaded step {iteration}")
    # The load set the data position; the step and FLOP count it returned go in through the facade's door
    snapshot = StepSnapshot(step, margs.consumed_train_samples, margs.skipped_train_samples, flops,
                            megatron.rng_states())
    megatron.set_iteration_state(snapshot)
    session.resume_at(snapshot)
    for wrapper in session.replay.iterators.values():
        wrapper.restart(megatron.iterator_at_sample(wrapper.inner, f"reload of step {step}"), step)
    megatron.position_valid_iterators(job.valid_data_iterator, f"reload of step {step}")
    logger.info("reloaded the checkpoint of step %d from %s in %.2f s", step, margs.save, time.monotonic() - started)
    return 0


RELOAD_CHECKPOINT = Stage("reload checkpoint", reload_checkpoint)
