"""Who owns a node rank (launch/node_liveness) on a real TCPStore, its values sealed as the launchers' are:
the first launcher, a taker after a lost owner, two takers after the same owner, of which exactly one wins,
and a stranger's write of the owner, which fences nobody and blocks no taker."""
import threading
import time

import pytest
from torch.distributed import TCPStore

from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue
from mindio_adaptor.launch import node_liveness
from mindio_adaptor.launch.store_keys import is_counter


def store():
    return SealedStore(TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False), "t0k", "r", is_counter)


def test_the_first_launcher_owns_incarnation_1_and_a_taker_the_next():
    s = store()
    assert node_liveness.owner(s, 1) == 0
    assert node_liveness.take_over(s, 1, 0) == 1 and node_liveness.owner(s, 1) == 1
    assert node_liveness.take_over(s, 1, 1) == 2 and node_liveness.owner(s, 1) == 2


def test_two_takers_after_the_same_owner_one_wins():
    s = store()
    node_liveness.take_over(s, 1, 0)
    results = [node_liveness.take_over(s, 1, 1), node_liveness.take_over(s, 1, 1)]
    assert sorted(results, key=str) == [2, None]
    assert node_liveness.take_over(s, 1, 1) is None  # a taker that saw an owner already replaced
    assert node_liveness.owner(s, 1) == 2


def test_a_node_is_lost_when_its_beat_stops_moving():
    s = store()
    s.add(node_liveness.beat_key(2), 1)
    watch = node_liveness.BeatWatch(s, [1, 2])
    s.add(node_liveness.beat_key(1), 1)
    assert watch.lost(0.0) == [2]  # node 1 beat since the watch began
    assert watch.lost(0.0) == [1, 2]


def test_a_node_that_never_beat_in_this_store_is_not_lost():
    """In a new node 0's store a survivor's owner comes back before its beat does."""
    s = store()
    node_liveness.take_over(s, 1, 0)
    watch = node_liveness.BeatWatch(s, [1])
    assert watch.lost(0.0) == []
    s.add(node_liveness.beat_key(1), 1)
    assert watch.lost(0.0) == []  # it moved
    assert watch.lost(0.0) == [1]


def test_a_strangers_owner_fences_nobody_and_blocks_no_taker():
    owner = store()
    node_liveness.take_over(owner, 1, 0)
    owner.raw.set(node_liveness.owner_key(1), "7:forged")  # written without the token, straight to the store
    assert node_liveness.owner(owner, 1) == 1  # the owner keeps the last sealed value it saw: not fenced
    watcher = SealedStore(owner.raw, "t0k", "r", is_counter)  # another launcher, which never saw a sealed one
    with pytest.raises(UnsealedValue, match="'node/1/owner'"):
        node_liveness.owner(watcher, 1)
    assert node_liveness.owner_or_none(watcher, 1) == 0  # a watcher takes no node on it
    assert node_liveness.take_over(watcher, 1, 1) == 2  # a taker with evidence replaces it
    assert node_liveness.owner(owner, 1) == 2  # and the owner finds itself fenced by that one


def test_a_stopped_beat_has_ended_its_thread_so_no_exit_finds_it_inside_a_store_call():
    """A daemon thread inside a torch store call at interpreter exit aborts the process (a launcher whose job
    had succeeded exited -6 in CI): stop() returns once the beat's thread has ended."""
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    beat = node_liveness.NodeBeat("127.0.0.1", master.port, "r", 1, lost_after=0.25)
    beat.start()
    time.sleep(0.4)
    beat.stop()
    assert not [t for t in threading.enumerate() if t.name == "node-beat"]
    beats = int(master.add("r/" + node_liveness.beat_key(1), 0))
    assert beats > 2  # it did beat, every lost_after / 5
    time.sleep(0.2)
    assert int(master.add("r/" + node_liveness.beat_key(1), 0)) == beats
