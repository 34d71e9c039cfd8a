"""Where a pause holds and when it is in force (csrc/controller/pause.h), on synthetic ranks through the
bindings: rank -> (last completed step, holds, finished)."""
from mindio_adaptor import _native as nat


def test_by_default_a_pause_holds_after_the_step_after_the_highest_completed_one():
    # rank 1 may be inside the update of step 5, but no rank can be past the boundary after it
    assert nat.pause_step({0: (3, False, False), 1: (4, False, False)}, -1) == (5, "")


def test_an_asked_step_is_kept_unless_a_rank_completed_a_later_one():
    live = {0: (3, False, False), 1: (4, False, False)}
    assert nat.pause_step(live, 4) == (4, "")
    assert nat.pause_step(live, 9) == (9, "")
    assert nat.pause_step(live, 2) == (-1, "rank 1 already completed step 4: a pause after step 2 cannot be kept")


def test_a_pause_is_in_force_once_every_live_rank_holds_at_its_step():
    assert nat.judge_hold({0: (5, True, False), 1: (5, True, False)}, 5)["kind"] == "holding"
    waiting = nat.judge_hold({0: (5, True, False), 1: (4, False, False), 2: (5, False, False)}, 5)
    assert waiting["kind"] == "waiting" and waiting["behind"] == {1, 2}


def test_a_rank_past_the_step_or_finished_ends_the_wait_naming_it():
    assert nat.judge_hold({0: (5, True, False), 1: (6, False, False)}, 5) == {
        "kind": "passed", "behind": set(), "rank": 1, "rank_step": 6}
    assert nat.judge_hold({0: (5, True, False), 3: (8, False, True)}, 9) == {
        "kind": "ended", "behind": set(), "rank": 3, "rank_step": 8}


def test_the_hold_limits():
    assert nat.DEFAULT_PAUSE_HOLD_MS == 600_000 and nat.MAX_PAUSE_HOLD_MS == 24 * 3600 * 1000
