"""The launcher's side of a hot switch (core/job/hand_over): a worker that marked itself handed over gets its new
process at once, not when its old one has exited: tearing a Megatron process down takes a second or more,
which the whole job would spend paused. The old process is watched until it ends (its exit is logged; it
should be 0) and ended with SIGKILL if it is still there LEAVE_GRACE_S later.

A node drained (every local rank handed over) while a standby launcher waits is left to that standby. Each mark
names the ranks of its switch: when they are every rank of this node, the launcher gathers its workers' marks (for
up to GATHER_S: a loaded host may stall a leaving rank for seconds), then goes, and the standby takes the node's
place as it takes a lost node's, its warm workers becoming the ranks' new processes (a backup controller the node
hosted is hosted again by the standby, as a lost node's). A switch of some of its ranks is handed over at once on
the node. Node 0 (the launchers' store, the leading controller) never goes: its ranks get new processes on the
node itself."""
from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Sequence, Set, Tuple

from mindio_adaptor.core.detection.exit_codes import describe
from mindio_adaptor.core.job import hand_over
from mindio_adaptor.launch.worker import Worker

LEAVE_GRACE_S = 60.0
GATHER_S = 30.0  # the marks of one drain come within milliseconds, or seconds on a stalled host


@dataclass
class Leaving:
    old: Worker  # the rank's old process, as a worker of its own
    since: float
    killed: bool = False


class HandOvers:
    def __init__(self, log):
        self.log = log
        self.dir = tempfile.mkdtemp(prefix="mindio-handover-")  # MINDIO_HANDOVER_DIR of this launcher's workers
        self.leaving: List[Leaving] = []
        self.pending: List[Worker] = []  # marked, not yet handed over: gathered for a drain
        self._switched: Set[int] = set()  # the ranks their switch hands over
        self._first_mark = 0.0

    def marked(self, workers: Sequence[Worker]) -> List[Tuple[Worker, FrozenSet[int]]]:
        """The workers whose current process marked itself handed over, each with the ranks of its switch
        (the marks are taken)."""
        marks = [(w, hand_over.take_mark(self.dir, w.pid)) for w in workers if w.proc is not None]
        return [(w, switched) for w, switched in marks if switched is not None]

    def ready(self, workers: Sequence[Worker], may_drain: Callable[[], bool]) -> Tuple[List[Worker], bool]:
        """(the workers whose new processes start now, whether the whole node goes to a standby instead).
        `may_drain`: whether this node may leave the job to a standby now (asked only while marks wait)."""
        for worker, switched in self.marked(workers):
            if worker in self.pending:
                continue
            if not self.pending:
                self._first_mark = time.monotonic()
            self.pending.append(worker)
            self._switched |= switched
        if not self.pending:
            return [], False
        drain = {w.rank for w in workers} <= self._switched and may_drain()
        if drain and len(self.pending) < len(workers) and time.monotonic() - self._first_mark < GATHER_S:
            return [], False
        taken, self.pending, self._switched = self.pending, [], set()
        return taken, drain and len(taken) == len(workers)

    def leave(self, worker: Worker) -> Worker:
        """The worker's current process becomes a leaving one; the worker is free for its new process."""
        old = Worker(worker.local_rank, worker.rank)
        old.proc = worker.proc
        self.leaving.append(Leaving(old, time.monotonic()))
        return old

    def reap(self) -> None:
        for leaving in list(self.leaving):
            old = leaving.old
            code = old.poll()
            if code is None and time.monotonic() - leaving.since < LEAVE_GRACE_S:
                continue
            if code is None:
                if not leaving.killed:
                    leaving.killed = True
                    old.signal(signal.SIGKILL)
                    self.log.info("rank %d: its old process (pid %d) still ran %.0f s after handing its rank over: "
                                  "killed", old.rank, old.pid, LEAVE_GRACE_S)
                continue  # reaped at a later check
            self.leaving.remove(leaving)
            old.end_leftovers()
            self.log.info("rank %d: its old process (pid %d) ended after handing its rank over: %s", old.rank,
                          old.pid, describe(code))

    def wait_for_the_leaving(self, timeout: float) -> None:
        """Until every leaving process ended (bounded), each exit logged."""
        deadline = time.monotonic() + timeout
        while self.leaving and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)

    def close(self) -> None:
        for leaving in self.leaving:
            leaving.old.signal(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self) -> dict:
        return {hand_over.ENV_HANDOVER_DIR: self.dir}
