"""The step path's ledger: what it counts, from when, and the line it says at the end, read back."""
import threading

from mindio_adaptor.core.steps.step_path_costs import StepPathCosts, background_cpu_ms, parse_line


class FakeClock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        self.now += 1000  # every reading 1 us after the last
        return self.now


def test_parts_count_from_the_end_of_the_first_step_and_the_line_reads_back():
    costs = StepPathCosts(clock=FakeClock())
    snapshot = costs.timed("snapshot", lambda step: step * 2)
    counters = {"frames to the controller": 10, "background CPU ms": 1.0}
    assert snapshot(1) == 2  # the first step's part: not counted
    costs.step_completed(lambda: counters)
    assert costs.calls == {} and costs.line(counters) is None
    for step in (2, 3, 4, 5):
        snapshot(step)
        costs.add("sections", 3000)
        costs.add("sections", 1000)
        counters = {"frames to the controller": counters["frames to the controller"] + 4, "background CPU ms": 1.5}
        costs.step_completed(lambda: counters)
    assert costs.per_step() == {"sections": (2.0, 4.0), "snapshot": (1.0, 1.0)}
    said = costs.line(counters)
    assert said == ("high availability on the step path: 4 steps after the first, per step 5 us in all: sections 4 us "
                    "(2 calls), snapshot 1 us (1 calls); per step background CPU ms 0.1, frames to the controller 4.0")
    assert parse_line("[mindio 12:00:00.000 rank 3] INFO " + said + "\n") == {
        "steps": 4, "total_us": 5, "parts": {"sections": (2.0, 4), "snapshot": (1.0, 1)},
        "counters": {"background CPU ms": 0.1, "frames to the controller": 4.0}}


def test_a_part_that_raises_is_still_counted_and_the_error_passes():
    costs = StepPathCosts(clock=FakeClock())
    costs.step_completed(dict)

    def failing(step):
        raise RuntimeError(f"step {step}")

    timed = costs.timed("fingerprints", failing)
    try:
        timed(7)
    except RuntimeError as err:
        assert str(err) == "step 7"
    else:
        raise AssertionError("the part's error was swallowed")
    assert costs.calls == {"fingerprints": 1} and timed.__wrapped__ is failing


def test_no_line_in_the_log_is_none():
    assert parse_line("iteration 3/ 8 | nothing else\n") is None


def test_background_cpu_counts_only_the_named_native_threads():
    """The thread that burns CPU here is a Python thread (named python by the OS), not one of ours."""
    before = background_cpu_ms()
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(lambda: stop.is_set(), True)])
    spinner.start()
    stop.wait(0.3)
    stop.set()
    spinner.join()
    assert background_cpu_ms() == before
