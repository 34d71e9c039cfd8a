"""Who owns a node rank (launch/node_liveness) on a real TCPStore: the first launcher, a taker after a
lost owner, and two takers after the same owner, of which exactly one wins."""
from torch.distributed import TCPStore

from mindio_adaptor.launch import node_liveness


def store():
    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


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
