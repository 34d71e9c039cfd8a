"""Where replaced process groups are dropped: on a daemon thread, once nothing else refers to them.

Why: a gloo group whose worker thread is still inside a collective (one the training thread abandoned,
core/communication/abandonable_waits) joins that thread in its destructor, which returns only at the group's timeout
(minutes; the GIL is released meanwhile). Whichever thread drops the last reference waits that long. Left
to chance it was the training thread, when the interrupted step's traceback was freed: the recomputed
step froze and the hang rule stopped the job. Here the last reference is this module's, dropped on its own
thread. At interpreter exit the thread is frozen with what it still holds, so the exit never waits.
What it holds is invisible to core/communication/group_repoint, which would otherwise put the new groups in their place
(as it did in the first version of this module, and the old groups were dropped by the training thread).
"""
from __future__ import annotations

import queue
import sys
import threading
from typing import Iterable

from mindio_adaptor.core.communication.group_repoint import KeepsOldGroups

POLL_S = 0.5
_arrivals: "queue.Queue[KeepsOldGroups]" = queue.Queue()
_lock = threading.Lock()
_digger: threading.Thread = None


def bury(objects: Iterable) -> None:
    """Take a reference to each object; drop it on the graveyard's thread once it is the last one."""
    _arrivals.put(KeepsOldGroups(objects))  # not a plain list: the re-pointing would swap new groups in
    _start()


def _start() -> None:
    global _digger
    with _lock:
        if _digger is None or not _digger.is_alive():
            _digger = threading.Thread(target=_tend, name="mindio-group-graveyard", daemon=True)
            _digger.start()


def _tend() -> None:
    held = KeepsOldGroups()  # a local, not a module global: interpreter teardown never frees it
    while True:
        try:
            held.extend(_arrivals.get(timeout=POLL_S))
        except queue.Empty:
            pass
        for i in reversed(range(len(held))):
            # getrefcount counts the list's slot and its own argument: 2 means nobody else refers to it
            if sys.getrefcount(held[i]) <= 2:
                del held[i]  # the destructor runs here, however long it takes
