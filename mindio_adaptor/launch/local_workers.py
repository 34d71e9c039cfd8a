"""A node's workers and what became of each: which exits were answered, which ranks left the job (a scale-in
dropped them) or ended after their training was over; stopping them all with one line that says how each
ended; and the launcher's summary of a node whose workers are done."""
from __future__ import annotations

import signal
import time
from typing import Dict, Iterator, List, Optional, Tuple

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB, describe
from mindio_adaptor.launch.policy import Outcome
from mindio_adaptor.launch.worker import Worker, stop_all

# Once the recovery controller ended the job, how long a worker started again alone may go on: one that
# had joined got the controller's EXIT like every rank and ends within it; one still starting would try to
# register with controllers that are gone for minutes (TTP_RETRY_TIMES).
REBOOTED_AFTER_END_GRACE_S = 15.0
REBOOTED_STOP_GRACE_S = 5.0


class LocalWorkers:
    def __init__(self, workers: List[Worker], log):
        self._workers, self.log = workers, log
        self.answered: set = set()  # pids whose exit was already answered
        self.ended_after_leaving: Dict[int, int] = {}  # rank -> the exit of a process whose training was over
        self.left_the_job: List[int] = []  # ranks a scale-in dropped: their processes exited LEFT_THE_JOB
        self._ended_seen_at: Optional[float] = None  # when the launcher first saw the controller's end

    def __iter__(self) -> Iterator[Worker]:
        return iter(self._workers)

    def __getitem__(self, local_rank: int) -> Worker:
        return self._workers[local_rank]

    def __len__(self) -> int:
        return len(self._workers)

    def any_running(self) -> bool:
        return any(w.running() for w in self._workers)

    def unanswered_exits(self) -> Iterator[Tuple[Worker, int]]:
        """Each worker whose process ended since the last look, with its code, marked answered as it is given."""
        for worker in self._workers:
            code = worker.poll()
            if code is None or worker.pid in self.answered:
                continue
            self.answered.add(worker.pid)
            yield worker, code

    def all_exited_0(self) -> bool:
        return all(w.poll() in (0, LEFT_THE_JOB) for w in self._workers)

    def all_left(self) -> bool:
        """Every local worker left the job, which goes on without this node (a scale-in dropped their slices):
        the node ends now, its backup controller with it, rather than at the job's end. Its node rank must be
        free for their return (a new launcher of it brings the ranks back for a scale-out and hosts its
        controller's slot again); and a job that goes on for hours would find the exit barrier's bound
        (EXIT_BARRIER_S) stop that controller anyway. Node 0 hosts the launchers' store and waits in any case."""
        return len(self.left_the_job) == len(self._workers)

    def stop(self, sig: int, why: str, grace: float) -> Dict[int, int]:
        """Stop every running local worker (sig, then SIGKILL after the grace); one line says how each ended.
        Returns {rank: return code} of those stopped and of those that had ended unanswered before."""
        # Workers that ended by themselves since the last check are named here too, or never.
        ended = {w.rank: w.poll() for w in self._workers if w.proc and not w.running() and w.pid not in self.answered}
        codes: Dict[int, int] = stop_all(self._workers, sig, grace)
        self.answered.update(w.pid for w in self._workers)
        if codes:
            self.log.info("stopped %d local worker%s (%s): %s", len(codes), "s" if len(codes) > 1 else "", why,
                          ", ".join(f"rank {rank} {describe(code)}" for rank, code in sorted(codes.items())))
        if ended:
            self.log.info("ended before the stop (%s): %s", why,
                          ", ".join(f"rank {rank} {describe(code)}" for rank, code in sorted(ended.items())))
        return {**ended, **codes}

    def stop_rebooted_after_the_end(self, ended: bool) -> None:
        """Workers started again alone that still run REBOOTED_AFTER_END_GRACE_S after the controller ended
        the job have no job to join: stopped (SIGTERM, then SIGKILL), once."""
        if not ended:
            return
        now = time.monotonic()
        self._ended_seen_at = self._ended_seen_at or now
        if now - self._ended_seen_at < REBOOTED_AFTER_END_GRACE_S:
            return
        late = [w for w in self._workers if w.reboots and w.running()]
        if not late:
            return
        pids = {w.rank: w.pid for w in late}
        codes = stop_all(late, signal.SIGTERM, REBOOTED_STOP_GRACE_S)
        self.answered.update(pids.values())
        self.log.info("stopped %s, started again alone and still running %.0f s after the recovery controller "
                      "ended the job (no job to join): %s", ", ".join(f"rank {r} (pid {p})" for r, p in pids.items()),
                      REBOOTED_AFTER_END_GRACE_S, ", ".join(f"rank {r} {describe(c)}" for r, c in codes.items()))

    def finished(self, ended: bool) -> Outcome:
        """The outcome of a node none of whose workers runs any more."""
        if ended:
            return Outcome(ENDED_BY_CONTROLLER, "the recovery controller ended the job")
        count = len(self._workers) - len(self.ended_after_leaving) - len(self.left_the_job)
        what = f"{count} local worker{'s' if count != 1 else ''} exited 0"
        if self.left_the_job:  # dropped by a scale-in: this node's part is done as well
            what = (f"{what if count else 'no local worker exited 0'}; ranks {self.left_the_job} left the job, "
                    f"which went on without them (elastic training)")
        if self.ended_after_leaving:
            what += "; after leaving the job: " + ", ".join(f"rank {rank} {describe(code)}" for rank, code
                                                           in sorted(self.ended_after_leaving.items()))
        return Outcome(0, what)

    def restarts(self) -> str:
        return ", ".join(f"rank {w.rank}: {w.starts - 1}" for w in self._workers)
