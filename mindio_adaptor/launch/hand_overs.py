"""The launcher's side of a hot switch (core/hand_over): a worker that marked itself handed over gets its new
process at once, not when its old one has exited: tearing a Megatron process down takes a second or more,
which the whole job would spend paused. The old process is watched until it ends (its exit is logged; it
should be 0) and ended with SIGKILL if it is still there LEAVE_GRACE_S later."""
from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import List, Sequence

from mindio_adaptor.core import hand_over
from mindio_adaptor.core.exit_codes import describe
from mindio_adaptor.launch.worker import Worker

LEAVE_GRACE_S = 60.0


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

    def due(self, workers: Sequence[Worker]) -> List[Worker]:
        """The workers whose current process marked itself handed over (the marks are taken)."""
        return [w for w in workers if w.proc is not None and hand_over.take_mark(self.dir, w.pid)]

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

    def close(self) -> None:
        for leaving in self.leaving:
            leaving.old.signal(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self) -> dict:
        return {hand_over.ENV_HANDOVER_DIR: self.dir}
