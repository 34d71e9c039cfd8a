"""A bounded end for a process's daemonic children (DataLoader workers among them) when it exits.

At exit, multiprocessing sends each daemonic child SIGTERM, then joins it with no time limit. A child
that cannot act on the signal holds its parent's exit forever, and with it the launcher and the job:
seen with a DataLoader worker deadlocked inside fork itself (CPython 3.11's fork-with-threads hazard: a
runtime lock held by another thread at the moment of fork), which never runs Python code again. This
exit handler runs before multiprocessing's: it sends the same SIGTERM, waits a bounded grace, then
SIGKILLs what is left.
"""
import atexit
import logging
import multiprocessing
import multiprocessing.util  # registers multiprocessing's exit handler first, so that ours runs before it
import time
from typing import List

logger = logging.getLogger(__name__)
GRACE_S = 5.0
_installed = False


def reap_daemonic_children(grace_s: float = GRACE_S) -> List[int]:
    """End this process's daemonic children; returns the pids that had to be killed."""
    children = [p for p in multiprocessing.active_children() if p.daemon]
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    stuck = [child for child in children if child.is_alive()]
    for child in stuck:
        child.kill()
        child.join(1.0)
    if stuck:
        logger.warning("at exit: daemonic child processes %s did not end within %.0f s of SIGTERM; killed them",
                       [child.pid for child in stuck], grace_s)
    return [child.pid for child in stuck]


def install() -> None:
    global _installed
    if not _installed:
        atexit.register(reap_daemonic_children)
        _installed = True
