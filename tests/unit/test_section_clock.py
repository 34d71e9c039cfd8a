"""The rank's section clock: what the processor is told when sections begin and end (patches/sections)."""
import pytest

from mindio_adaptor.core.detection.hang_rule import limits_from_env
from mindio_adaptor.patches.sections import SectionClock


class RecordingProcessor:
    def __init__(self):
        self.calls = []

    def begin_section(self, name, limit_s):
        self.calls.append(("begin", name, limit_s))

    def end_section(self):
        self.calls.append(("end",))


@pytest.fixture
def processor():
    return RecordingProcessor()


@pytest.fixture
def clock(processor):
    return SectionClock(limits_from_env(600.0, environ={}), processor)


def test_start_up_lasts_until_the_train_loop_and_has_the_collective_timeout(clock, processor):
    clock.open("startup")
    clock.end("startup")
    clock.end("startup")  # ended once
    assert processor.calls == [("begin", "startup", 600.0), ("end",)]


def test_a_timed_section_replaces_start_up_which_then_ends_nothing(clock, processor):
    clock.open("startup")
    with clock.timed("eval"):
        pass
    clock.end("startup")
    assert processor.calls == [("begin", "startup", 600.0), ("begin", "eval", 600.0), ("end",)]


def test_a_failed_section_ends_and_is_not_measured(clock, processor):
    with pytest.raises(RuntimeError):
        with clock.timed("step"):
            raise RuntimeError("collective failed")
    assert processor.calls == [("begin", "step", 600.0), ("end",)]
    assert clock.limits.limit("step")[1].startswith("initial (0 of")


def test_start_up_limit_from_the_environment(processor):
    clock = SectionClock(limits_from_env(600.0, environ={"MINDIO_STARTUP_TIMEOUT_S": "90"}), processor)
    clock.open("startup")
    assert processor.calls == [("begin", "startup", 90.0)]
