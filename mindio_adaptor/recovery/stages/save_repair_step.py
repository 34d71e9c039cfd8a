"""ROLLBACK's last stage, on every rank: the periodic checkpoint of the repair step R, where the fault kept
Megatron from writing it. Megatron saves R right after R's update (`--save-interval`); a fault in that save, or
between the update and the save, leaves R complete on the survivors but unsaved (an interrupted save is abandoned
and its partial directory removed: patches/interrupted_save), and training goes on at R + 1, so the checkpoint the
user asked for at R would never exist and the resume point would stay a whole interval further back.

Written as the training loop writes it (every rank of the job, its layout, Megatron's own save_checkpoint) into a
staging directory that rank 0 publishes once every rank is done (core/checkpoint/dump_dir): a crash meanwhile leaves the
previous resume point or this one. Whether R is owed is decided alike on every rank (the save is collective), from
R, the interval and the tracker, which no rank writes before the decision."""
import logging
import time
from typing import Optional

from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.recovery.staged_checkpoint import save_and_publish
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def periodic_save_owed(step: int, save_root: Optional[str], save_interval: Optional[int]) -> bool:
    """The loop owes a checkpoint of `step` (a multiple of --save-interval, with --save) and the tracker does
    not name it: the save was interrupted, or never began."""
    if not save_root or not save_interval or step <= 0 or step % save_interval:
        return False
    return dump_dir.tracked_step(save_root) != step


def save_repair_step(session, megatron, action) -> int:
    step, job, root = action.step, session.job, session.save_root
    margs = megatron.args()
    if not periodic_save_owed(step, root, margs.save_interval):
        return 0
    started = time.monotonic()
    snapshot = session.snapshot_of(step, "write the periodic checkpoint of")
    save_and_publish(megatron, job, root, snapshot, range(margs.world_size), margs.world_size)
    if margs.rank == 0:
        logger.info("step %d: its periodic checkpoint (--save-interval %d), which the fault interrupted or came "
                    "before, saved after the recovery in %.2f s", step, margs.save_interval,
                    time.monotonic() - started)
    session.timeline.mark("repair step saved", f"step {step} in {time.monotonic() - started:.2f} s")
    return 0


SAVE_REPAIR_STEP = Stage("save the repair step", save_repair_step)
