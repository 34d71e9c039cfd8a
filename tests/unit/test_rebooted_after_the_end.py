"""launch/local_workers: once the recovery controller ended the job, a worker the launcher started again alone
(worker reboot) that still runs after a grace has no job to join (its registration would retry for minutes
against controllers that are gone): it is stopped, once; the other workers are left alone. Real processes
stand in for the workers."""
import logging
import signal
import subprocess
import sys

from mindio_adaptor.launch import local_workers
from mindio_adaptor.launch.local_workers import LocalWorkers
from mindio_adaptor.launch.worker import Worker


def node_of(workers):
    return LocalWorkers(workers, logging.getLogger("test_rebooted_after_the_end"))


def sleeper(rank, reboots):
    worker = Worker(rank, rank)
    worker.start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    worker.reboots = reboots
    return worker


def test_a_rebooted_worker_still_running_after_the_end_is_stopped_and_the_others_are_not(monkeypatch, caplog):
    monkeypatch.setattr(local_workers, "REBOOTED_AFTER_END_GRACE_S", 0.0)
    first, rebooted = sleeper(0, reboots=0), sleeper(1, reboots=1)
    launcher = node_of([first, rebooted])
    try:
        launcher.stop_rebooted_after_the_end(ended=False)
        assert first.running() and rebooted.running()  # the job was not ended
        with caplog.at_level(logging.INFO, logger="test_rebooted_after_the_end"):
            launcher.stop_rebooted_after_the_end(ended=True)
        assert rebooted.poll() == -signal.SIGTERM and first.running()
        assert launcher.answered == {rebooted.pid}
        assert "stopped rank 1 (pid %d), started again alone and still running 0 s after the recovery controller " \
               "ended the job (no job to join)" % rebooted.pid in caplog.text
    finally:
        for worker in (first, rebooted):
            worker.signal(signal.SIGKILL)
            worker.proc.wait(timeout=10)


def test_within_the_grace_nothing_is_stopped(monkeypatch):
    monkeypatch.setattr(local_workers, "REBOOTED_AFTER_END_GRACE_S", 60.0)
    rebooted = sleeper(1, reboots=1)
    launcher = node_of([rebooted])
    try:
        launcher.stop_rebooted_after_the_end(ended=True)
        assert rebooted.running() and launcher._ended_seen_at is not None
    finally:
        rebooted.signal(signal.SIGKILL)
        rebooted.proc.wait(timeout=10)
