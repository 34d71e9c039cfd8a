import pytest

from mindio_adaptor.core.steps.replay_iterator import ReplayableIterator


def test_replay_gives_the_interrupted_step_again_then_goes_on():
    it = ReplayableIterator(iter(range(10)))
    it.begin_step(1)
    assert [next(it), next(it)] == [0, 1]
    it.begin_step(2)
    assert next(it) == 2
    assert it.rewind() == 1
    assert [next(it), next(it), next(it)] == [2, 3, 4]
    assert it.rewind() == 3  # a second fault in the recompute replays the whole step again
    assert [next(it) for _ in range(4)] == [2, 3, 4, 5]


def test_positioned_after_the_repair_step():
    it = ReplayableIterator(iter(range(10)))
    it.begin_step(4)
    assert [next(it), next(it)] == [0, 1]
    it.begin_step(5)
    assert next(it) == 2
    assert it.position_after(4) == 1  # step 5 interrupted: its item again
    assert next(it) == 2


def test_a_step_completed_elsewhere_keeps_its_items_consumed():
    it = ReplayableIterator(iter(range(10)))
    it.begin_step(5)
    assert [next(it), next(it)] == [0, 1]
    assert it.position_after(5) == 0  # the other instance completed step 5: go on with step 6's items
    assert next(it) == 2


def test_a_position_it_cannot_reach_is_an_error_naming_both_steps():
    it = ReplayableIterator(iter(range(10)))
    it.begin_step(7)
    next(it)
    with pytest.raises(ValueError, match="in step 7; it cannot be positioned after step 4"):
        it.position_after(4)
