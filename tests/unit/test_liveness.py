"""The controller's liveness judgement (csrc/controller/liveness) on synthetic heartbeat and progress
timelines: silence makes a suspect, never a death; a hang needs a section past its limit (or a silence
past the silence limit), and names the ranks that did not progress, not the peers waiting on them."""
from mindio_adaptor import _native as nat


def rank(**fields):
    base = {"silent_ms": 500, "heartbeat_ms": 2000, "step": 4, "section": "step", "section_ms": 900,
            "limit_ms": 12000, "progress": 4}
    return {**base, **fields}


def judge(ranks, **kwargs):
    return nat.judge_liveness(ranks, **kwargs)


def test_a_healthy_job_has_no_suspect_and_no_hang():
    verdict = judge([rank() for _ in range(4)])
    assert verdict == {"suspects": [], "hung": [], "why": ""}


def test_silence_of_three_periods_makes_a_suspect_not_a_hang():
    # Rank 3 stopped for 7 s in the middle of a step whose limit is 12 s: suspect only.
    ranks = [rank(section_ms=7000) for _ in range(3)] + [rank(silent_ms=7000, section_ms=100, progress=1)]
    verdict = judge(ranks)
    assert verdict["suspects"] == [3] and verdict["hung"] == []


def test_a_silent_rank_is_hung_once_a_section_runs_past_its_limit():
    ranks = [rank(section_ms=12500) for _ in range(3)] + [rank(silent_ms=12400, section_ms=100, progress=1)]
    verdict = judge(ranks)
    assert verdict["suspects"] == [3] and verdict["hung"] == [3]
    assert "rank 0's step has run 13000 ms, past its limit of 12000 ms" in verdict["why"]
    assert "silent: [3]" in verdict["why"]


def test_the_silent_ranks_own_extrapolated_section_counts():
    # Only the silent rank's section is past its limit (its age grows with the silence).
    ranks = [rank(section="none", section_ms=0) for _ in range(3)] + [rank(silent_ms=11000, section_ms=2000)]
    assert judge(ranks)["hung"] == [3]


def test_a_rank_hung_in_compute_is_named_by_its_progress_not_its_peers():
    # Rank 2 hangs in the forward of a micro-batch; the others finished theirs and wait in the gradient
    # all-reduce. Everyone's heartbeat is fine and everyone's step is past its limit.
    ranks = [rank(section_ms=13000, progress=4) for _ in range(4)]
    ranks[2]["progress"] = 0
    verdict = judge(ranks)
    assert verdict["suspects"] == [] and verdict["hung"] == [2]
    assert "furthest behind: [2] at step 4 with 0 units" in verdict["why"]


def test_the_peers_past_their_limit_first_do_not_blame_themselves():
    # The hung rank started its step later, so only its peers are past the limit yet.
    ranks = [rank(section_ms=12100, progress=4) for _ in range(3)] + [rank(section_ms=11000, progress=1)]
    assert judge(ranks)["hung"] == [3]


def test_a_rank_stuck_between_steps_is_behind_the_ones_in_the_next_step():
    ranks = [rank(section_ms=12100, progress=0) for _ in range(3)] + [rank(section="none", section_ms=0, progress=0)]
    assert judge(ranks)["hung"] == [3]


def test_an_older_step_is_behind_whatever_its_section():
    ranks = [rank(step=5, section="save", section_ms=70000, limit_ms=60000) for _ in range(3)]
    ranks.append(rank(step=4, section="step", section_ms=3000, progress=4))
    assert judge(ranks)["hung"] == [3]


def test_no_rank_behind_names_every_rank_and_says_so():
    verdict = judge([rank(section_ms=20000) for _ in range(4)])
    assert verdict["hung"] == [0, 1, 2, 3]
    assert "no rank is behind the others" in verdict["why"]


def test_a_section_without_limit_never_hangs():
    assert judge([rank(section_ms=10 ** 9, limit_ms=0) for _ in range(2)])["hung"] == []


def test_silence_past_the_silence_limit_hangs_even_between_sections():
    ranks = [rank(section="none", section_ms=0) for _ in range(2)] + [rank(section="none", silent_ms=61000)]
    verdict = judge(ranks, silence_limit_ms=60000)
    assert verdict["hung"] == [2] and "silent for more than 60000 ms" in verdict["why"]


def test_a_silence_limit_shorter_than_the_missed_periods_still_names_the_silent_rank():
    ranks = [rank(), rank(silent_ms=1500, heartbeat_ms=2000)]
    verdict = judge(ranks, silence_limit_ms=1000)
    assert verdict["suspects"] == [1] and verdict["hung"] == [1]


def test_unwatched_ranks_are_ignored():
    ranks = [rank(section_ms=13000, progress=4), rank(watched=False, silent_ms=10 ** 6, progress=0)]
    verdict = judge(ranks)
    assert verdict["suspects"] == [] and verdict["hung"] == [0]


def test_misses_and_period_set_the_suspect_threshold():
    assert judge([rank(silent_ms=1600, heartbeat_ms=500)], heartbeat_misses=3.0)["suspects"] == [0]
    assert judge([rank(silent_ms=1400, heartbeat_ms=500)], heartbeat_misses=3.0)["suspects"] == []


def test_a_timeline_stall_then_recovery():
    """One rank stopped for 8 s during a 0.5 s step, then continued: sampled every second, it is a
    suspect once silent for more than three 2 s periods, and never hung."""
    verdicts = []
    for t in range(0, 10):
        stalled = t < 8
        ranks = [rank(silent_ms=t % 2 * 1000, section_ms=t * 1000 if stalled else 200) for _ in range(3)]
        ranks.append(rank(silent_ms=t * 1000 if stalled else 100, section_ms=0 if stalled else 200))
        verdicts.append(judge(ranks))
    assert [v["suspects"] for v in verdicts] == [[], [], [], [], [], [], [], [3], [], []]
    assert all(v["hung"] == [] for v in verdicts)
