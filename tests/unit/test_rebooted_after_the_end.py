"""launch/agent: once the recovery controller ended the job, a worker the launcher started again alone
(worker reboot) that still runs after a grace has no job to join (its registration would retry for minutes
against controllers that are gone): it is stopped, once; the other workers are left alone. Real processes
stand in for the workers."""
import logging
import signal
import subprocess
import sys

from mindio_adaptor.launch import agent
from mindio_adaptor.launch.worker import Worker


class Launcher:
    """The part of NodeAgent the check reads."""

    def __init__(self, workers):
        self.workers, self.ended, self._ended_seen_at, self._reported = workers, False, None, set()
        self.log = logging.getLogger("test_rebooted_after_the_end")


def sleeper(rank, reboots):
    worker = Worker(rank, rank)
    worker.start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    worker.reboots = reboots
    return worker


def test_a_rebooted_worker_still_running_after_the_end_is_stopped_and_the_others_are_not(monkeypatch, caplog):
    monkeypatch.setattr(agent, "REBOOTED_AFTER_END_GRACE_S", 0.0)
    first, rebooted = sleeper(0, reboots=0), sleeper(1, reboots=1)
    launcher = Launcher([first, rebooted])
    try:
        agent.NodeAgent._stop_rebooted_after_the_end(launcher)
        assert first.running() and rebooted.running()  # the job was not ended
        launcher.ended = True
        with caplog.at_level(logging.INFO, logger="test_rebooted_after_the_end"):
            agent.NodeAgent._stop_rebooted_after_the_end(launcher)
        assert rebooted.poll() == -signal.SIGTERM and first.running()
        assert launcher._reported == {rebooted.pid}
        assert "stopped rank 1 (pid %d), started again alone and still running 0 s after the recovery controller " \
               "ended the job (no job to join)" % rebooted.pid in caplog.text
    finally:
        for worker in (first, rebooted):
            worker.signal(signal.SIGKILL)
            worker.proc.wait(timeout=10)


def test_within_the_grace_nothing_is_stopped(monkeypatch):
    monkeypatch.setattr(agent, "REBOOTED_AFTER_END_GRACE_S", 60.0)
    rebooted = sleeper(1, reboots=1)
    launcher = Launcher([rebooted])
    launcher.ended = True
    try:
        agent.NodeAgent._stop_rebooted_after_the_end(launcher)
        assert rebooted.running() and launcher._ended_seen_at is not None
    finally:
        rebooted.signal(signal.SIGKILL)
        rebooted.proc.wait(timeout=10)
