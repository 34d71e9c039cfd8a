"""A checkpoint save that a fault interrupted is abandoned cleanly.

Megatron writes `latest_checkpointed_iteration.txt` only after every rank wrote its part, so an
interrupted save is never the resume point; but its `iter_N` stays, half written, until a later save
of the same iteration overwrites it, which after a fault may never come (online repair goes on after
it, an exit ends the job). Each rank whose save raised notes the iteration; once the controller has
decided (every rank is stopped or gone: nobody writes into it any more) the partial directory is
removed, unless the tracker names that iteration (a dump of the same step published in its place).
Every rank of the save tries; the rename-aside in core/dump_dir lets exactly one of them do it.
"""
import logging
from typing import Optional

from mindio_adaptor.core import dump_dir
from mindio_adaptor.patches.registry import Patch

logger = logging.getLogger(__name__)


class _Interrupted:
    iteration: Optional[int] = None  # of the save of this rank that raised, until the decision


INTERRUPTED = _Interrupted()


def _note_interrupted_save(wrapped, instance, args, kwargs):
    iteration = args[0] if args else kwargs["iteration"]
    try:
        return wrapped(*args, **kwargs)
    except BaseException:
        INTERRUPTED.iteration = iteration
        raise


def remove_after_decision(save_root: Optional[str], training_goes_on: bool) -> None:
    """Called on a rank that waited for the controller's decision, once it came."""
    iteration, INTERRUPTED.iteration = INTERRUPTED.iteration, None
    if iteration is None or not save_root:
        return
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
    Patch("megatron.training.training", "save_checkpoint_and_time", _note_interrupted_save),
]
