"""stages/stop: the training thread is broken out of its collective and must park; a thread that does
not park in time fails the action, naming the limit."""
import threading
import time

import pytest

from recovery_fakes import FakeMegatron, action, marks, session_at
from mindio_adaptor.recovery.stages.stop import STOP, stop_training


def test_stop_returns_once_the_training_thread_parks():
    session = session_at(3)

    def training_thread():  # parks once asked to stop, as exception_loop's wait does
        assert session.thread.stop_requested.wait(5)
        time.sleep(0.2)
        session.thread.parked.set()

    worker = threading.Thread(target=training_thread)
    worker.start()
    started = time.monotonic()
    assert stop_training(session, FakeMegatron(), action("stop", strategy="retry")) == 0
    worker.join(5)
    assert 0.15 < time.monotonic() - started < 5
    assert marks(session) == ["stopped"]
    assert not STOP.on_training_thread  # it runs while the training thread is still busy


def test_a_training_thread_that_never_parks_fails_the_stop(monkeypatch):
    monkeypatch.setenv("MINDIO_STOP_TIMEOUT_S", "1")
    session = session_at(3)
    with pytest.raises(RuntimeError, match=r"did not stop within 1 s \(MINDIO_STOP_TIMEOUT_S\); it is hung"):
        stop_training(session, FakeMegatron(), action("stop", strategy="retry"))
    assert session.thread.stop_requested.is_set()
