"""The launcher's lifeline (launch/lifeline.py) with real sockets and a real process holding it: a killed
process is proven gone at once, a stopped one (a stalled host) and one that left on purpose never are."""
import os
import signal
import subprocess
import sys
import time

import pytest
from torch.distributed import HashStore

from mindio_adaptor.launch import lifeline
from mindio_adaptor.launch.config import DEFAULT_LOST_AFTER_S
from mindio_adaptor.launch.lifeline import LifelineAddress, LifelineWatch

HOLDER = """
import sys
from mindio_adaptor.launch.lifeline import Lifeline
line = Lifeline("127.0.0.1")
print(line.port, flush=True)
sys.stdin.readline()  # EOF or a line: leave on purpose
line.leave()
print("left", flush=True)
"""


@pytest.fixture
def holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    yield proc, port
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
    proc.wait(timeout=10)


def watched(port, incarnation=2, node=1):
    store = HashStore()
    store.set(lifeline.lifeline_key(node), LifelineAddress(incarnation, "127.0.0.1", port).encode())
    watch = LifelineWatch(store, [node])
    assert watch.gone() == {}  # connects, and the holder is alive
    return watch


# How long a test waits for a killed holder to be proven gone. A killed process's end takes a fraction of a
# second on a quiet host; the suite runs on two cores with many processes (CI, load average near 30 seen), where
# the test itself may wait seconds for a core: the bound is generous, the proof is what is tested.
KILLED_PROVEN_GONE_S = 30


def gone_within(watch, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gone = watch.gone()
        if gone:
            return gone
        time.sleep(0.05)
    return {}


def test_a_killed_launcher_is_proven_gone_at_once(holder):
    proc, port = holder
    watch = watched(port)
    began = time.monotonic()
    proc.kill()
    assert gone_within(watch, KILLED_PROVEN_GONE_S) == {1: 2}
    # Before the beat's rule (--node-lost-after, DEFAULT_LOST_AFTER_S by default) could say anything.
    assert time.monotonic() - began < DEFAULT_LOST_AFTER_S
    assert lifeline.refused(LifelineAddress(2, "127.0.0.1", port))


def test_a_stopped_launcher_is_never_taken_for_gone(holder):
    proc, port = holder
    watch = watched(port)
    os.kill(proc.pid, signal.SIGSTOP)  # a stalled host: its kernel keeps the connection and accepts new ones
    try:
        assert gone_within(watch, 3) == {}
        assert not lifeline.refused(LifelineAddress(2, "127.0.0.1", port))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    assert gone_within(watch, KILLED_PROVEN_GONE_S) == {1: 2}  # still watched after the stall


def test_a_launcher_that_left_on_purpose_is_not_gone(holder):
    proc, port = holder
    watch = watched(port)
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "left"
    proc.wait(timeout=10)
    assert gone_within(watch, 2) == {}  # its port refuses now, but it said goodbye first


def test_a_new_owner_is_watched_and_the_old_one_forgotten(holder):
    proc, port = holder
    store = HashStore()
    key = lifeline.lifeline_key(1)
    store.set(key, LifelineAddress(2, "127.0.0.1", port).encode())
    watch = LifelineWatch(store, [1])
    assert watch.gone() == {}
    store.set(key, LifelineAddress(3, "127.0.0.1", port).encode())  # the same holder, as a new incarnation
    assert watch.gone() == {}  # holds the new one now
    proc.kill()
    # (On failure: whether the watch gave up the address, or still holds a connection.)
    assert gone_within(watch, KILLED_PROVEN_GONE_S) == {1: 3}, (watch._done, watch._conns)


def test_what_gives_no_proof(holder):
    _, port = holder
    store = HashStore()
    store.set(lifeline.lifeline_key(1), "not an address")
    store.set(lifeline.lifeline_key(2), LifelineAddress(2, "127.0.0.1", 1).encode())  # nothing ever listened
    watch = LifelineWatch(store, [0, 1, 2])  # node 0 published nothing
    assert lifeline.published(store, 1) is None and lifeline.published(store, 0) is None
    assert gone_within(watch, 1) == {}  # refused before it was ever held: the beat decides, not this
    assert not lifeline.refused(LifelineAddress(2, "127.0.0.1", port))  # alive


def test_the_address_round_trips_with_an_ipv6_host():
    address = LifelineAddress(7, "fe80::1", 4242)
    assert LifelineAddress.decode(address.encode()) == address
