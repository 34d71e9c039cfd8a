"""The goodput ledger (csrc/controller/goodput.h) on synthetic timelines through the bindings: every second
from the controller's start to the job's end in exactly one use, a step far slower than usual partly a stall,
a checkpoint save no stall, the step a fault interrupted and the steps done again after a rollback counted as
recomputed, per recovery with its phases."""
import pytest

from mindio_adaptor import _native as nat
from mindio_adaptor.status.goodput import goodput_line

TIMELINE = [
    (0.0, "INIT", -1, "starting"),
    (2.0, "NORMAL", -1, "starting"),
    (3.0, "NORMAL", -1, "training"),    # the train loop began
    (4.0, "NORMAL", 1, "training"),
    (5.0, "NORMAL", 2, "training"),
    (6.0, "NORMAL", 3, "training"),
    (6.5, "NORMAL", 3, "saving"),       # a periodic checkpoint, 2 s
    (8.5, "NORMAL", 3, "training"),
    (9.0, "NORMAL", 4, "training"),     # 1 s of step and 2 s of saving: no stall
    (14.0, "NORMAL", 5, "training"),    # 5 s for a 1 s step: 4 s stalled
    (14.5, "ABNORMAL", 5, "training"),  # a fault 0.5 s into step 6
    (15.5, "REPAIR", 5, "training"),
    (16.5, "NORMAL", 4, "training"),    # rolled back to step 4
    (17.5, "NORMAL", 5, "training"),    # step 5 again
    (18.5, "NORMAL", 6, "training"),
    (19.0, "PAUSE", 6, "training"),
    (22.0, "NORMAL", 6, "training"),
    (22.5, "NORMAL", 7, "training"),
]


def test_every_second_is_in_one_use_and_they_add_up_to_the_wall_time():
    wall, uses, recoveries = nat.goodput_of_timeline(TIMELINE, 23.0, 30.0)
    assert uses == pytest.approx({"start_up": 3.0, "productive": 7.5, "saving": 2.0, "stalled": 4.0,
                                  "paused": 3.0, "recovering": 2.0, "recomputed": 1.5})
    assert wall == pytest.approx(23.0)  # the job ended at 23 s: later time is no job's
    assert recoveries == [(1, pytest.approx({"ABNORMAL": 1.0, "REPAIR": 1.0}), pytest.approx(1.5))]


def test_a_running_job_counts_its_step_in_progress_and_no_stall_before_three_usual_steps():
    wall, uses, recoveries = nat.goodput_of_timeline(
        [(0.0, "NORMAL", -1, "training"), (9.0, "NORMAL", 1, "training"), (10.0, "NORMAL", 2, "training")], -1, 10.5)
    assert wall == pytest.approx(10.5) and uses["stalled"] == 0.0
    assert uses["productive"] == pytest.approx(10.5) and recoveries == []


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown state 'RUNNING'"):
        nat.goodput_of_timeline([(0.0, "RUNNING", -1, "training")], -1, 1.0)
    with pytest.raises(ValueError, match="unknown activity 'idle'"):
        nat.goodput_of_timeline([(0.0, "NORMAL", -1, "idle")], -1, 1.0)


def test_the_line_people_read():
    wall, uses, recoveries = nat.goodput_of_timeline(TIMELINE, 23.0, 30.0)
    line = goodput_line({"wall_s": wall, "uses": uses, "recoveries": [
        {"number": n, "phases": p, "recomputed_s": r} for n, p, r in recoveries]})
    assert line == ("goodput 0.33 of 23.00 s: productive 7.50 s, start-up 3.00 s, saving 2.00 s, stalled 4.00 s, "
                    "paused 3.00 s, recovering 2.00 s, recomputed 1.50 s; recovery #1: ABNORMAL 1.00 s, REPAIR 1.00 s, "
                    "recomputed 1.50 s")
