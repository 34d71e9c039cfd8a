"""Where replaced process groups are dropped: on a daemon thread, once nothing else refers to them.

Why: a gloo group whose worker thread is still inside a collective (one the training thread abandoned,
core/abandonable_waits) joins that thread in its destructor, which returns only at the group's timeout
(minutes; the GIL is released meanwhile). Whichever thread drops the last reference waits that long. Left
to chance it was the training thread, when the interrupted step's traceback was freed: the recomputed
step froze and the hang rule stopped the job. Here the last reference is this module's, dropped on its own
thread. At interpreter exit the thread is frozen with what it still holds, so the exit never waits.
"""
from __future__ import annotations

import queue
import sys
import threading
from typing import Iterable

POLL_S = 0.5
_arrivals: "queue.Queue[list]" = queue.Queue()
_lock = threading.Lock()
_digger: threading.Thread = None


def bury(objects: Iterable) -> None:
    """Take a reference to each object; drop it on the graveyard's thread once it is the last one."""
    _arrivals.put(list(objects))
    _start()


def _start() -> None:
    global _digger
    with _lock:
        if _digger is None or not _digger.is_alive():
            _digger = threading.Thread(target=_tend, name="mindio-group-graveyard", daemon=True)
            _digger.start()


def _tend() -> None:
    held: list = []  # a local, not a module global: interpreter teardown never frees it
    while True:
        try:
            held.extend(_arrivals.get(timeout=POLL_S))
        except queue.Empty:
            pass
        # getrefcount counts its own argument and the list's slot: 2 means nobody else refers to it
        last = [i for i, obj in enumerate(held) if sys.getrefcount(obj) <= 3]
        for i in reversed(last):
            del held[i]  # the destructor runs here, however long it takes
