"""Waits on gloo collectives that a stop can abandon: the part of "stop device work" that shutting down
the connections (core/communication/comm_abort) cannot do alone.

Why: a gloo send that meets a closing connection can hang until the group's timeout (minutes). When the
write fails with EPIPE or ECONNRESET, gloo's TCP pair queues the operation to retry it later; when the
pair then fails, it signals the error to queued sends of bound buffers only, so an unbound-buffer send,
the kind the ring all-reduce uses, waits in `UnboundBuffer::waitSend` for the full timeout (seen with
gdb on torch 2.13: the training thread in `Work::wait`, a `pt_gloo_runloop` thread in `waitSend`, every
gloo socket of the process already closed). It happens to a healthy rank whose peer is stopped while
the two exchange data, e.g. tensor-parallel partners, one in three tp2 faults under load.

So on gloo every wait without a timeout is cut into short waits, and between them the training thread
asks whether a stop wants it out. When it does, the wait raises CollectiveAbandoned: the training thread
leaves the collective and parks, and the gloo thread still inside it is left behind with its group, which
the recovery tears down and replaces anyway. A collective that completes is unchanged; a wait given a
timeout by its caller is passed through as it is.

Point-to-point operations (send, recv: a pipeline's stages) are waited on whole: gloo ends a timed wait on
one that passes its timeout by signalling the timeout to every pair of the group's context
(`UnboundBuffer::waitRecv`, `waitSend`), which breaks the group, so a healthy stage that waits 0.2 s for its
neighbour (found: the next stage during a step held by a test; a slow data loader does the same) failed as a
communication fault. The whole wait runs on a helper thread while the training thread waits for it in short
waits, asking about a stop between them: a send to a stage that stopped is one more unbound-buffer send that
no closed connection ends, and it held a healthy stage past the stop's limit (pp2 with a virtual pipeline, the
whole suite, once), so the rank could not save.
"""
from __future__ import annotations

import threading
import weakref
from datetime import timedelta
from typing import Callable, Optional

import torch.distributed as dist

SLICE = timedelta(milliseconds=200)
_TIMED_OUT = "Operation timed out!"  # c10d Work::wait's message when its timeout passes

_ORIGINAL_WAIT = dist.Work.wait
_POINT_TO_POINT = ("send", "recv", "recv_anysource")  # ProcessGroup's methods, under every torch.distributed p2p call
_ORIGINAL_P2P = {name: getattr(dist.ProcessGroup, name) for name in _POINT_TO_POINT}
_waited_whole: "weakref.WeakSet" = weakref.WeakSet()  # point-to-point works: never waited on in slices
_stop_wanted: Optional[Callable[[], bool]] = None


class CollectiveAbandoned(RuntimeError):
    """The training thread left a collective because a stop asked it to."""


def install(stop_wanted: Callable[[], bool]) -> None:
    """Make every untimed `Work.wait` of this process abandonable; `stop_wanted()` is asked between the
    short waits (from the waiting thread) and must be cheap. Installing again replaces the question."""
    global _stop_wanted
    _stop_wanted = stop_wanted
    dist.Work.wait = _abandonable_wait
    for name, original in _ORIGINAL_P2P.items():
        setattr(dist.ProcessGroup, name, _whole_wait_for(original))


def _whole_wait_for(point_to_point):
    def started(*args, **kwargs):
        work = point_to_point(*args, **kwargs)
        _waited_whole.add(work)
        return work

    started.__name__, started.__doc__ = point_to_point.__name__, point_to_point.__doc__
    return started


def _abandonable_wait(work, timeout: timedelta = timedelta(0)):
    if timeout != timedelta(0):  # timedelta(0) is c10d's "no timeout"
        return _ORIGINAL_WAIT(work, timeout)
    if work in _waited_whole:
        return _wait_whole_aside(work)
    while True:
        try:
            return _ORIGINAL_WAIT(work, SLICE)
        except RuntimeError as exc:
            if _TIMED_OUT not in str(exc):
                raise
        _leave_if_a_stop_wants_it("a collective")


def _wait_whole_aside(work):
    """The untimed wait, on a helper thread that a stop leaves behind in it with the group."""
    done, outcome = threading.Event(), {}

    def wait() -> None:
        try:
            outcome["result"] = _ORIGINAL_WAIT(work, timedelta(0))
        except BaseException as exc:  # noqa: BLE001 - raised again on the waiting thread
            outcome["error"] = exc
        done.set()

    threading.Thread(target=wait, name="mindio-p2p-wait", daemon=True).start()
    while not done.wait(SLICE.total_seconds()):
        _leave_if_a_stop_wants_it("a point-to-point operation")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _leave_if_a_stop_wants_it(what: str) -> None:
    stop_wanted = _stop_wanted
    if stop_wanted is not None and stop_wanted():
        raise CollectiveAbandoned(f"a stop was requested while this thread waited in {what}; "
                                  "it leaves it to its group, which the recovery replaces")
