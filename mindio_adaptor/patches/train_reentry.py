"""Entering Megatron's train loop again at the repair step.

After an online repair every rank continues from the repair step R. A rank interrupted in step R+1
recomputes that step where it stands (patches/exception_loop). Every other rank leaves Megatron's
train() and calls it again with its arguments at R (iteration, data position, FLOPs), as a resume from
a checkpoint of R would, without loading one: a rank whose own step R was interrupted while the other
replica instance completed it (it took R's state from a peer, patches/repair_state), a rank stopped
between two steps, a replacement process. The start of Megatron's loop has world barriers (the
interval timer, print_datetime) that the ranks recomputing in place never reach: they are skipped
until this rank's first train_step. Megatron logs the first step of a train() call as a start (printed
whatever the log interval, its loss kept in the next line's average); after a re-entry it is logged
as the uninterrupted run logs it.
"""
import logging

from mindio_adaptor.patches import step_snapshot
from mindio_adaptor.patches.registry import Patch

logger = logging.getLogger(__name__)


class ResumeTraining(Exception):
    """Raised out of train_step to leave Megatron's train loop; the loop is entered again at `step`."""

    def __init__(self, step: int, where: str):
        super().__init__(f"training resumes after step {step} ({where})")
        self.step, self.where = step, where


class Reentry:
    def __init__(self):
        self.skip_barriers = False
        self.first_log_pending = False


REENTRY = Reentry()


def prepare(step: int, where: str) -> None:
    """Megatron's arguments at `step`, its timers stopped, barriers skipped until the first step."""
    from megatron.training.global_vars import get_timers

    step_snapshot.set_args(step_snapshot.require(step, "re-enter the train loop after"))
    for timer in get_timers()._timers.values():
        timer._started = False  # the loop left behind runs its interval timer; the new loop starts it
    enter_as_a_resumed_loop()
    logger.info("entering Megatron's train loop again after step %d (this rank was %s)", step, where)


def enter_as_a_resumed_loop() -> None:
    """The next train loop skips its start barriers until the first step, and its first step is logged
    like the uninterrupted run's (Megatron's last rank prints the losses: a replacement may be it)."""
    REENTRY.skip_barriers = True
    REENTRY.first_log_pending = True


def first_step_started() -> None:
    REENTRY.skip_barriers = False


def _barrier_unless_reentering(wrapped, instance, args, kwargs):
    if REENTRY.skip_barriers:
        return None
    return wrapped(*args, **kwargs)


def _log_as_uninterrupted(wrapped, instance, args, kwargs):
    if REENTRY.first_log_pending and kwargs.get("is_first_iteration"):
        kwargs["is_first_iteration"] = False
    REENTRY.first_log_pending = False
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch("torch.distributed", "barrier", _barrier_unless_reentering),
    Patch("megatron.training.training", "training_log", _log_as_uninterrupted),
]
