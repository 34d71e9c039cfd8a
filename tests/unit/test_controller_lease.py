"""A leader's lease (controller/lease.h), through the bindings: it acts on a fault only while at least half of the
world is heard from or proven ended. A rank is (heard, proven ended)."""
import pytest

from mindio_adaptor import _native as nat


@pytest.mark.parametrize("world", range(1, 10))
def test_the_leader_and_a_backup_never_both_act(world):
    # The leader's side holds the lease with `count` ranks; a backup leads that world's other ranks only as a
    # strict majority: for every split exactly one of them may act.
    for count in range(world + 1):
        lease = nat.judge_lease([(rank < count, False) for rank in range(world)])
        backup = nat.judge_election(world, [(rank, 1, False) for rank in range(count, world)])
        assert lease["held"] == (2 * count >= world), (world, count)
        assert lease["held"] != backup["lead"], (world, count, lease, backup)


def test_a_tie_goes_to_the_leader():
    lease = nat.judge_lease([(True, False), (True, False), (False, False), (False, False)])
    assert lease["held"] and lease["counted"] == 2 and lease["unknown"] == {2, 3}
    assert lease["why"] == "2 of 4 ranks connected or proven ended; ranks [2,3] lost without proof of an end"


def test_a_proven_end_counts_as_a_rank_heard_from():
    # One rank heard, two whose launchers reported their processes ended, one silent: 3 of 4.
    lease = nat.judge_lease([(True, False), (False, True), (False, True), (False, False)])
    assert lease["held"] and lease["counted"] == 3 and lease["unknown"] == {3}


def test_a_leader_left_with_a_minority_loses_it():
    lease = nat.judge_lease([(False, False), (False, False), (False, False), (True, False)])
    assert not lease["held"] and lease["counted"] == 1 and lease["unknown"] == {0, 1, 2}
    assert lease["why"] == ("1 of 4 ranks connected or proven ended; ranks [0,1,2] lost without proof of an end: "
                            "less than half of the world")
