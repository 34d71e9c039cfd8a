"""One local worker process, and stopping a set of them within a bounded grace.

A plain subprocess.Popen per worker rather than torch.distributed.elastic.multiprocessing: a PContext starts,
waits for and closes the local group as one unit and has no way to start one member again, which is exactly
what worker reboot needs. Each worker leads its own process group (start_new_session), so stopping it also
reaches what it started (data-loader processes and the like).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Dict, List, Mapping, Optional, Sequence

import psutil

from mindio_adaptor.launch.forked_workers import WorkerTemplate
from mindio_adaptor.launch.membership import Membership
from mindio_adaptor.launch.restart_loop import RestartLoop

KILL_WAIT_S = 10.0  # after SIGKILL a process is gone at once unless stuck in the kernel: bound it anyway


class Worker:
    def __init__(self, local_rank: int, rank: int):
        self.local_rank, self.rank = local_rank, rank
        self.proc = None  # subprocess.Popen, or launch/forked_workers.ForkedWorker
        self.starts = 0  # processes started for this rank, over all generations
        self.reboots = 0  # of those, started again alone (worker reboot)
        self.warm = False  # the current process was a warm worker (launch/warm_worker.py)
        self.alone = False  # the current process was started again alone (worker reboot)
        self.started_at = 0.0  # time.monotonic() when the current process was started or handed its rank
        self.given: Optional[Membership] = None  # the job's lists the current process got
        self.loop = RestartLoop()

    def lived_s(self) -> float:
        return time.monotonic() - self.started_at

    def start(self, command: Sequence[str], env: Mapping[str, str], template: Optional[WorkerTemplate] = None) -> int:
        """A new process, forked from the worker template when there is one and it can."""
        forked = template.spawn(command, env) if template is not None else None
        self.proc = forked or subprocess.Popen(list(command), env=dict(env), start_new_session=True)
        self.starts, self.warm, self.started_at = self.starts + 1, False, time.monotonic()
        return self.proc.pid

    def hand_to(self, warm: subprocess.Popen, env: Mapping[str, str], argv: Sequence[str]) -> int:
        """Make a warm worker this rank's process (OSError when it died meanwhile)."""
        warm.stdin.write(json.dumps({"env": dict(env), "argv": list(argv)}) + "\n")
        warm.stdin.close()
        self.proc = warm
        self.starts, self.warm, self.started_at = self.starts + 1, True, time.monotonic()
        return warm.pid

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def poll(self) -> Optional[int]:
        """The return code once the process ended (negative: the signal that killed it), else None."""
        return self.proc.poll() if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def end_leftovers(self) -> List[int]:
        """SIGKILL what an ended worker left in its process group (helpers it started); returns their pids.
        The group outlives its leader while a member lives, so its id cannot name anything else."""
        if self.proc is None or self.running():
            return []
        members = []
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == self.proc.pid:
                    members.append(proc.pid)
            except (ProcessLookupError, PermissionError):
                continue
        if members:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # they ended meanwhile
                pass
        return members

    def signal(self, sig: int) -> None:
        if not self.running():
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:  # ended between the check and the signal
            pass


def stop_all(workers: Sequence[Worker], sig: int = signal.SIGTERM, grace: float = 30.0) -> Dict[int, int]:
    """Send `sig` to every running worker, SIGKILL those still running after `grace` seconds.
    Returns {rank: return code} of the workers that were running."""
    running = [w for w in workers if w.running()]
    for worker in running:
        worker.signal(sig)
    _wait(running, grace)
    late = [w for w in running if w.running()]
    for worker in late:
        worker.signal(signal.SIGKILL)
    _wait(late, KILL_WAIT_S)
    return {w.rank: w.poll() for w in running}


def _wait(workers: List[Worker], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(w.running() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
