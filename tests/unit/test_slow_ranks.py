"""The slow-rank signal (csrc/controller/slow_ranks.h) on synthetic steps through the bindings: a rank whose
median compute per window stays over the factor times the ranks' median is slow after `windows` windows in a
row, and well again after as many calm ones; one long step, a lagging rank's unfinished window and tiny
differences call nobody slow."""
from mindio_adaptor import _native as nat

LIVE = {0, 1, 2, 3}


def steps(first, last, ms_of_rank):
    return [(rank, step, ms_of_rank(rank, step)) for step in range(first, last + 1) for rank in sorted(LIVE)]


def test_a_rank_three_times_slower_for_three_windows_is_slow_once():
    computes = steps(1, 8, lambda rank, step: 300 if rank == 2 else 100)
    assert nat.judge_slow_ranks(computes, LIVE, window_steps=2, windows=3) == [
        (2, True, "steps 5-6: compute 300 ms per step against the ranks' median of 100 ms "
                  "(3 windows of 2 steps in a row over 1.5x)")]


def test_one_long_step_per_window_calls_nobody_slow():
    computes = steps(1, 9, lambda rank, step: 2000 if (rank, step % 3) == (1, 0) else 100)
    assert nat.judge_slow_ranks(computes, LIVE, window_steps=3, windows=1) == []


def test_a_window_some_live_rank_has_not_completed_is_not_judged_yet():
    computes = [c for c in steps(1, 4, lambda rank, step: 500 if rank == 0 else 100) if c[:2] != (3, 4)]
    assert nat.judge_slow_ranks(computes, LIVE, window_steps=2, windows=2) == []  # rank 3 is still in step 4
    assert nat.judge_slow_ranks(computes + [(3, 4, 100)], LIVE, window_steps=2, windows=2)[0][:2] == (0, True)


def test_a_slow_rank_that_recovers_is_said_well_again():
    computes = steps(1, 12, lambda rank, step: 400 if rank == 1 and step <= 4 else 100)
    assert [n[:2] for n in nat.judge_slow_ranks(computes, LIVE, window_steps=2, windows=2)] == [(1, True), (1, False)]


def test_a_difference_within_the_floor_is_no_slowness():
    computes = steps(1, 6, lambda rank, step: 30 if rank == 2 else 10)  # 3x, but 20 ms: noise at this size
    assert nat.judge_slow_ranks(computes, LIVE, window_steps=2, windows=1) == []
