"""A checkpoint save that a fault interrupted is abandoned cleanly.

Megatron writes `latest_checkpointed_iteration.txt` only after every rank wrote its part, so an
interrupted save is never the resume point; but its `iter_N` stays, half written, until a later save
of the same iteration overwrites it, which after a fault may never come (online repair goes on after
it, an exit ends the job). Each rank whose save raised notes the iteration; once the controller has
decided (every rank is stopped or gone: nobody writes into it any more) the partial directory is
removed, unless the tracker names that iteration (a dump of the same step published in its place).
Every rank of the save tries; the rename-aside in core/checkpoint/dump_dir lets exactly one of them do it. When
the interrupted save was of the repair step, the recovery writes it again (stages/save_repair_step).

An asynchronous save (--async-save) that is not finalized yet is abandoned the same way: its
finalisation is a collective at the start of a later step, which after a fault cannot run (and a
replacement process would have nothing to match it with), so at the decision each rank aborts its
checkpoint writer (Megatron's own abort: the worker process is killed, a new one is made for the next
save) and the unfinalized iterations are removed like an interrupted one.

An abandoned save may also have left its write results in the checkpoint writer's queue; they are
dropped at the decision, before training goes on to a later save (megatron/checkpoint_queue).
"""
import logging
from typing import List, Optional

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


def _note_save(wrapped, instance, args, kwargs):
    iteration = args[0] if args else kwargs["iteration"]
    try:
        result = wrapped(*args, **kwargs)
    except BaseException:
        SESSION.saves.iteration = iteration
        raise
    if megatron_job.args().async_save:  # Megatron turns it off where it cannot run
        SESSION.saves.scheduled.append(iteration)
    return result


def _abandon_unfinalized_async_saves() -> List[int]:
    """Abort this rank's checkpoint writer when it has saves not finalized; returns their iterations."""
    pending = megatron_job.unfinalized_async_saves()
    if not pending:
        return []
    iterations = list(SESSION.saves.scheduled)[-pending:]
    megatron_job.abort_async_checkpoint_writer()
    SESSION.saves.scheduled.clear()
    logger.warning("asynchronous checkpoint save(s) of iteration(s) %s not finalized before the fault: "
                   "the writer is aborted", iterations)
    return iterations


def remove_after_decision(save_root: Optional[str], training_goes_on: bool) -> None:
    """Called on a rank that waited for the controller's decision, once it came."""
    iterations = _abandon_unfinalized_async_saves()
    # No save of this rank runs now (stopped, the writer aborted): a result left in the writer's queue
    # is an abandoned save's, and the next periodic save would take it for its own.
    megatron_job.discard_stale_write_results("after the decision")
    if SESSION.saves.iteration is not None:
        iterations.append(SESSION.saves.iteration)
    SESSION.saves.iteration = None
    if save_root:
        for iteration in sorted(set(iterations)):
            _remove(save_root, iteration, training_goes_on)


def _remove(save_root: str, iteration: int, training_goes_on: bool) -> None:
    try:
        removed = dump_dir.remove_unfinished(save_root, iteration)
    except OSError as err:
        logger.warning("the checkpoint save of iteration %d was interrupted by the fault, and its partial %s "
                       "could not be removed (%s): it stays, unmarked", iteration,
                       dump_dir.iteration_dir_name(iteration), err)
        return
    if removed:
        tracked = dump_dir.tracked_step(save_root)
        logger.warning("the checkpoint save of iteration %d was interrupted by the fault: its partial %s is "
                       "removed (the resume point stays %s; %s)", iteration, dump_dir.iteration_dir_name(iteration),
                       "none" if tracked is None else f"iteration {tracked}",
                       "training goes on" if training_goes_on else "the job ends")


PATCHES = [
    Patch("megatron.training.training", "save_checkpoint_and_time", _note_save),
]
