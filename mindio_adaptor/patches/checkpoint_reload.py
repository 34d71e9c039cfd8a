"""Online reload of the last periodic checkpoint (the reference's LOAD_CKPT), when no live replica holds
a faulty rank's optimizer shard (R=1, --distributed-optimizer-no-replica, or every holder faulty).

Every rank tells the controller each periodic checkpoint it has finished writing. After a fault the
controller, finding no replica to repair from, has every rank (all alive, its groups rebuilt at CLEAN)
load that checkpoint again with Megatron's own load_checkpoint, in the REPAIR action: model, optimizer,
scheduler, RNG, data position. ROLLBACK (patches/online_repair) then takes every rank to that step and
the training threads enter Megatron's train loop again there (patches/train_reentry); the steps since
the checkpoint are computed again. No process restarts.

The checkpoint step is reported when Megatron's save returns on the rank (its writes are complete);
asynchronous saves (--async-save) complete later and are not reported, so they are never reloaded.
"""
import logging
import time

from mindio_adaptor.patches import step_snapshot
from mindio_adaptor.patches.registry import Patch
from mindio_adaptor.patches.training_state import STATE

logger = logging.getLogger(__name__)


def _report_saved_step(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    from megatron.training.global_vars import get_args

    from mindio_adaptor.patches.exception_loop import ha_enabled
    from mindio_adaptor.ttp import processor

    iteration = args[0] if args else kwargs["iteration"]
    if ha_enabled() and not get_args().async_save:
        processor.tft_report_saved_ckpt_step(int(iteration))
    return result


def reload(step: int) -> int:
    """REPAIR with RepairType LOAD_CKPT, on the parked training thread of every rank."""
    from megatron.training.checkpointing import load_checkpoint
    from megatron.training.global_vars import get_args

    started = time.monotonic()
    margs = get_args()
    if not margs.save:
        raise RuntimeError(f"asked to reload the checkpoint of step {step}, but this run saves none (--save)")
    pinned, margs.ckpt_step = getattr(margs, "ckpt_step", None), step  # the reported step, not the tracker's
    try:
        iteration, flops = load_checkpoint(STATE.model, STATE.optimizer, STATE.scheduler, load_arg="save")
    finally:
        margs.ckpt_step = pinned
    if iteration != step:
        raise RuntimeError(f"asked to reload the checkpoint of step {step} from {margs.save}; loaded step {iteration}")
    margs.iteration, margs.num_floating_point_operations_so_far = iteration, flops
    step_snapshot.LATEST = step_snapshot.StepSnapshot(step, margs.consumed_train_samples,
                                                      margs.skipped_train_samples, flops,
                                                      step_snapshot.rng_states())
    STATE.completed_steps.append(step)
    _position_train_iterators(margs, step)
    logger.info("reloaded the checkpoint of step %d from %s in %.2f s", step, margs.save, time.monotonic() - started)
    return 0


def _position_train_iterators(margs, step: int) -> None:
    from mindio_adaptor.patches.data_position import iterator_at_sample
    from mindio_adaptor.patches.online_repair import REPLAY

    for wrapper in REPLAY.values():
        wrapper.restart(iterator_at_sample(wrapper.inner, margs, f"reload of step {step}"), step)


PATCHES = [
    Patch("megatron.training.training", "save_checkpoint_and_time", _report_saved_step),
]
