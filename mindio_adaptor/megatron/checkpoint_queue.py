"""The queue through which Megatron's torch_dist checkpoint writer hands a save's write results to its metadata
(patches/checkpoint_writer keeps it served; its docstring tells the story of the results a save abandoned)."""
import logging
import queue
import sys
from typing import Optional

logger = logging.getLogger(__name__)

MODULE = "megatron.core.dist_checkpointing.strategies.filesystem_async"


def discard_stale_write_results(when: str) -> int:
    """Drop every write result left in the checkpoint writer's queue; call only when no save of this
    process can still hand one in (its saves ended or were abandoned, an asynchronous writer aborted).
    `when` names the moment for the log. Returns how many were dropped."""
    results = _existing_results_queue()
    dropped = 0
    try:
        while results is not None:
            results.get_nowait()
            dropped += 1
    except queue.Empty:
        pass
    except (OSError, EOFError):  # the helper is gone: the next save gets a new, empty queue
        sys.modules[MODULE]._results_queue = None
    if dropped:
        logger.warning("%s: dropped %d write result(s) of an abandoned checkpoint save from the checkpoint "
                       "writer's queue (the next save would have written them into its metadata)", when, dropped)
    return dropped


def _existing_results_queue() -> Optional[object]:
    module = sys.modules.get(MODULE)
    return getattr(module, "_results_queue", None) if module is not None else None
