"""Entering Megatron's train loop again at the repair step.

After an online repair every rank continues from the repair step R. A rank interrupted in step R+1
recomputes that step where it stands (patches/exception_loop). Every other rank leaves Megatron's
train() and calls it again with its arguments at R (iteration, data position, FLOPs), as a resume from
a checkpoint of R would, without loading one: a rank whose own step R was interrupted while the other
replica instance completed it (it took R's state from a peer, recovery/stages/repair_from_peer), a rank stopped
between two steps, a replacement process. The start of Megatron's loop has world barriers (the
interval timer, print_datetime) that the ranks recomputing in place never reach: they are skipped
until this rank's first train_step. Megatron logs the first step of a train() call as a start (printed
whatever the log interval, its loss kept in the next line's average); after a re-entry it is logged
as the uninterrupted run logs it.
"""
import logging

logger = logging.getLogger(__name__)


class ResumeTraining(Exception):
    """Raised out of train_step to leave Megatron's train loop; the loop is entered again at `step`."""

    def __init__(self, step: int, where: str):
        super().__init__(f"training resumes after step {step} ({where})")
        self.step, self.where = step, where


def prepare(session, megatron, step: int, where: str) -> None:
    """Megatron's arguments at `step`, its timers stopped, barriers skipped until the first step."""
    megatron.set_iteration_state(session.snapshot_of(step, "re-enter the train loop after"))
    megatron.set_running_timers()  # the loop left behind runs its interval timer; the new loop starts it
    enter_as_a_resumed_loop(session)
    logger.info("entering Megatron's train loop again after step %d (this rank was %s)", step, where)


def enter_as_a_resumed_loop(session) -> None:
    """The next train loop skips its start barriers until the first step, and its first step is logged
    like the uninterrupted run's (Megatron's last rank prints the losses: a replacement may be it)."""
    session.reentry.skip_barriers = True
    session.reentry.first_log_pending = True


def first_step_started(session) -> None:
    session.reentry.skip_barriers = False
