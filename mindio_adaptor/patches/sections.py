"""What the controller's hang rule sees of Megatron: start-up, the train step, checkpoint saves and
evaluation as timed sections, each with the limit this rank derived from its own history (core/detection/hang_rule), and the
micro-batches' forwards and backwards as progress inside them. The controller judges a hang from
these (csrc/controller/liveness), so a rank hung in compute, in a collective, in the data loader or
stopped by the OS is found in seconds, and its peers waiting on it are not blamed.

Sections are reported only once the processor is connected (controller_link arms them); start-up runs
from then until the train loop starts. The train step's section is opened by the exception loop around
each attempt, so the time a rank spends parked in a recovery is no step time. With --async-save the
save section covers scheduling the write and, at the end of training, the wait for the writer; the
write itself runs in Megatron's writer process while the rank trains on.
"""
import logging
import time
from contextlib import contextmanager
from typing import Optional

from mindio_adaptor.core.detection.hang_rule import SectionLimits
from mindio_adaptor.core.steps.step_path_costs import COSTS
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


class SectionClock:
    """Times this rank's sections and tells the processor when each starts and ends."""

    def __init__(self, limits: SectionLimits, processor):
        self.limits = limits
        self._processor = processor
        self._announced = set()
        self._open: Optional[str] = None

    @contextmanager
    def timed(self, section: str):
        beginning = COSTS.clock()
        limit_s, how = self.limits.limit(section)
        measured = not how.startswith("initial")
        if (section, measured) not in self._announced:  # the first limit, then the first measured one
            self._announced.add((section, measured))
            logger.info("hang rule: %s limit %.1f s (%s)", section, limit_s, how)
        self._processor.begin_section(section, limit_s)
        self._open = None  # a section opened by open() is replaced
        COSTS.add("sections", COSTS.clock() - beginning)
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self._processor.end_section()
            raise
        ending = COSTS.clock()
        self._processor.end_section()
        self.limits.record(section, time.monotonic() - started)
        COSTS.add("sections", COSTS.clock() - ending)

    def open(self, section: str) -> None:
        """A section with no end in one block (start-up): it lasts until the next one begins or end()."""
        limit_s, how = self.limits.limit(section)
        logger.info("hang rule: %s limit %.1f s (%s)", section, limit_s, how)
        self._processor.begin_section(section, limit_s)
        self._open = section

    def end(self, section: str) -> None:
        if self._open == section:
            self._open = None
            self._processor.end_section()

    def progress(self) -> None:
        self._processor.add_progress(1)


def arm(limits: SectionLimits, processor) -> None:
    SESSION.section_clock = SectionClock(limits, processor)
    SESSION.section_clock.open("startup")


@contextmanager
def timed(section: str):
    """The section on this rank's clock, or nothing before the processor is connected."""
    clock = SESSION.section_clock
    if clock is None:
        yield
        return
    with clock.timed(section):
        yield


def _progress() -> None:
    if SESSION.section_clock is not None:
        started = COSTS.clock()
        SESSION.section_clock.progress()
        COSTS.add("progress", COSTS.clock() - started)


def _startup_ends(wrapped, instance, args, kwargs):
    if SESSION.section_clock is not None:
        SESSION.section_clock.end("startup")
    return wrapped(*args, **kwargs)


def _timed_save(wrapped, instance, args, kwargs):
    with timed("save"):
        return wrapped(*args, **kwargs)


def _timed_blocking_finalize(wrapped, instance, args, kwargs):
    """Waiting for the asynchronous saves to finish (the end of training) is a save: a writer that hangs
    is found by the save's limit. The non-blocking check at each step's start only polls."""
    blocking = args[0] if args else kwargs.get("blocking", False)
    if not blocking:
        return wrapped(*args, **kwargs)
    with timed("save"):
        return wrapped(*args, **kwargs)


def _timed_evaluation(wrapped, instance, args, kwargs):
    with timed("eval"):
        return wrapped(*args, **kwargs)


def _forward_counted(wrapped, instance, args, kwargs):
    if SESSION.section_clock is None or not args:
        return wrapped(*args, **kwargs)
    forward_step_func, *rest = args

    def forward_step(*f_args, **f_kwargs):
        result = forward_step_func(*f_args, **f_kwargs)
        _progress()
        return result

    return wrapped(forward_step, *rest, **kwargs)


def _backward_counted(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    _progress()
    return result


PATCHES = [
    Patch("megatron.training.training", "train", _startup_ends),
    Patch("megatron.training.training", "save_checkpoint_and_time", _timed_save),
    Patch("megatron.training.async_utils", "maybe_finalize_async_save", _timed_blocking_finalize),
    Patch("megatron.training.training", "evaluate_and_print_results", _timed_evaluation),
    Patch("megatron.training.training", "train_step", _forward_counted),
    Patch("megatron.core.pipeline_parallel.schedules", "backward_step", _backward_counted),
]
