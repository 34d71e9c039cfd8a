"""A rank cut off from the job leaves it (docs/controller.md, "A partition's minority leaves the job").

It lost the controller it was registered with and has no proof that the controller's process is gone (a
silence, not a refused connection), and the backup it reached answered that the ranks that reached it are a
minority; one more round of its controller list found no leader. The leader may be alive on the other side of
a network partition, leading the majority, which will replace this rank. Training on would take steps beside
the job, and a dying-gasp checkpoint written here would stand beside the majority's run; nothing here can be
agreed on without a leader. So the process ends at once, whatever its training thread is doing (a collective
with ranks on the other side never returns): one line naming why, then exit code JOB_UNREACHABLE (88, which
its launcher answers by starting it again only once the job's lists changed).

The native processor also refuses the next optimizer update once cut off, so a process that does not arm
this watcher takes no step either."""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Callable

from mindio_adaptor.core.detection.exit_codes import JOB_UNREACHABLE

logger = logging.getLogger(__name__)

WATCH_SLICE_S = 1.0  # each wait of the watcher; it ends with the processor


def leave(who: str, reason: str, end: Callable[[int], None] = os._exit) -> None:
    """One line naming why, then the process ends with JOB_UNREACHABLE (`end`, for tests)."""
    logger.error("%s is cut off from the job: %s. It leaves the job without a checkpoint and without another "
                 "training step; exiting with code %d (JOB_UNREACHABLE)", who, reason, JOB_UNREACHABLE)
    for handler in logging.getLogger().handlers:  # os._exit skips logging's own flush at exit
        handler.flush()
    sys.stderr.flush()
    end(JOB_UNREACHABLE)


def leave_when_cut_off(link, who: str, end: Callable[[int], None] = os._exit,
                       slice_s: float = WATCH_SLICE_S) -> threading.Thread:
    """A daemon thread that waits (in bounded slices) for `link`'s processor to be cut off and then ends the
    process by `leave`; it ends by itself once the processor is stopped, and at the latest at the process's
    exit, which waits for it: a daemon thread that comes back from a native wait while the interpreter
    finalises is unwound through no-throw frames into std::terminate, and the process ends -6 (SIGABRT)."""
    exiting = threading.Event()

    def watch() -> None:
        while not exiting.is_set():
            reason = link.native.wait_cut_off(slice_s)
            if reason is None:  # the processor was stopped: this process left the job its own way
                return
            if reason:
                leave(who, reason, end)
                return

    thread = threading.Thread(target=watch, name="mindio-cut-off", daemon=True)
    thread.start()
    # atexit runs the last registered first: a link's disconnect, registered after this, has stopped its processor.
    atexit.register(_end_at_exit, exiting, thread, slice_s)
    return thread


def _end_at_exit(exiting: threading.Event, thread: threading.Thread, slice_s: float) -> None:
    exiting.set()
    thread.join(slice_s + 1.0)
