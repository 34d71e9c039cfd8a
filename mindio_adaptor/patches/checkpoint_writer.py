"""Megatron's torch_dist checkpoint writer reports its results through a queue served by a helper
process (a multiprocessing Manager), created at the first save and kept for every later one. The
helper is a child of the rank, in the rank's process group, so when a rank dies torchrun's SIGTERM to
the others' groups (or `mindio-adaptor launch`'s group restart) ends it while the rank itself lives
on. Every later save of that process then failed with a broken pipe: the dying-gasp checkpoint after a
fault, in any job that had saved a periodic checkpoint before it, and the save after a graceful
SIGTERM. A queue whose helper is gone is replaced by a new one before it is used. Megatron spawns the helper
(from 0.16; 0.12 forks it), and a spawned child ran the whole training script again before serving: at the first
save of each rank, often the dying-gasp checkpoint, the rank waited for it (core/process/script_free_spawn).

The queue is also the only link between a save's files and its metadata: a save puts its write results
(file, offset and length of every item) in it after writing its files, waits at a closing barrier, and
only then takes them out, first in first out, for the .metadata. A save abandoned at that barrier (a
rank lost, or a stop) leaves its results in the queue, and the next save of the process took them
instead of its own: a checkpoint whose .metadata points into its files at another save's offsets, which
no load can read (`invalid load key, '\x00'`). Before any save that follows an abandoned one, what is left
in the queue is dropped (megatron/checkpoint_queue.discard_stale_write_results).

megatron-core 0.12's writer calls torch's `_write_item` without the serialization format that torch 2.6 and
later require (every torch_dist save failed); 0.13 passes torch's own default, and so does the patch here."""
import logging
import sys

from mindio_adaptor.core.process.script_free_spawn import entry_script_not_rerun
from mindio_adaptor.megatron.call_arguments import has_parameter, passes
from mindio_adaptor.megatron.checkpoint_queue import MODULE
from mindio_adaptor.patches.patch import Patch

logger = logging.getLogger(__name__)



def _live_results_queue(wrapped, instance, args, kwargs):
    with entry_script_not_rerun():  # a new queue's helper (spawned from 0.16 on) starts in a fraction of a second
        queue = wrapped(*args, **kwargs)
        try:
            queue.qsize()  # one round trip to the helper process
            return queue
        except (OSError, EOFError) as gone:
            sys.modules[MODULE]._results_queue = None
            logger.warning("the checkpoint writer's results queue had lost its helper process (%s: %s); a new "
                           "one serves this save", type(gone).__name__, gone)
            return wrapped(*args, **kwargs)


def _with_serialization_format(wrapped, instance, args, kwargs):
    if has_parameter(wrapped, "serialization_format") and not passes(wrapped, args, kwargs, "serialization_format"):
        from torch.distributed.checkpoint.filesystem import SerializationFormat

        kwargs = {**kwargs, "serialization_format": SerializationFormat.TORCH_SAVE}
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch(MODULE, "get_write_results_queue", _live_results_queue, first="0.17"),
    Patch(MODULE, "_get_write_results_queue", _live_results_queue, last="0.16"),  # private before 0.17
    # torch's function, imported by name: no source hook can carry it
    Patch(MODULE, "_write_item", _with_serialization_format, upstream=False, last="0.12"),
]
