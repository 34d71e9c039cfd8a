"""Megatron's torch_dist checkpoint writer reports its results through a queue served by a helper
process (a multiprocessing Manager), created at the first save and kept for every later one. The
helper is a child of the rank, in the rank's process group, so when a rank dies torchrun's SIGTERM to
the others' groups (or `mindio-adaptor launch`'s group restart) ends it while the rank itself lives
on. Every later save of that process then failed with a broken pipe: the dying-gasp checkpoint after a
fault, in any job that had saved a periodic checkpoint before it, and the save after a graceful
SIGTERM. A queue whose helper is gone is replaced by a new one before it is used."""
import logging
import sys

from mindio_adaptor.patches.patch import Patch

logger = logging.getLogger(__name__)

MODULE = "megatron.core.dist_checkpointing.strategies.filesystem_async"


def _live_results_queue(wrapped, instance, args, kwargs):
    queue = wrapped(*args, **kwargs)
    try:
        queue.qsize()  # one round trip to the helper process
        return queue
    except (OSError, EOFError) as gone:
        sys.modules[MODULE]._results_queue = None
        logger.warning("the checkpoint writer's results queue had lost its helper process (%s: %s); a new "
                       "one serves this save", type(gone).__name__, gone)
        return wrapped(*args, **kwargs)


PATCHES = [
    Patch(MODULE, "get_write_results_queue", _live_results_queue),
]
