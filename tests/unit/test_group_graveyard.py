"""core/communication/group_graveyard: a buried object is dropped on the graveyard's thread, and only once nothing else
refers to it; a slow destructor there holds no other thread."""
import threading
import time

from mindio_adaptor.core.communication import group_graveyard


class SlowToDie:
    def __init__(self, seconds, log):
        self.seconds, self.log = seconds, log

    def __del__(self):
        self.log.append(threading.current_thread().name)
        time.sleep(self.seconds)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def test_the_last_reference_is_dropped_on_the_graveyards_thread():
    log = []
    group = SlowToDie(2.0, log)
    group_graveyard.bury([group])
    time.sleep(2 * group_graveyard.POLL_S)
    assert log == []  # still referred to here: kept
    started = time.monotonic()
    del group  # this thread's reference goes; the graveyard's is now the last
    assert time.monotonic() - started < 0.5  # the 2 s destructor did not run here
    assert wait_for(lambda: log == ["mindio-group-graveyard"])
