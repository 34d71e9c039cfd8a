"""A replacement process joins the running job, at the start of Megatron's train loop: it reports
ready ("ARF FINISH") and parks like a rank after a fault; the controller then runs REBUILD_GROUP,
REPAIR and ROLLBACK on every rank (recovery/flows's "recover" flow), and on RETRY this process
enters Megatron's train loop at the repair step (patches/train_reentry) while the others recompute
the step they were interrupted in. Not an action's stage: the replacement's way into the flow."""
import logging
import time

from mindio_adaptor.recovery import decision_wait, train_reentry

logger = logging.getLogger(__name__)


def join_as_replacement(session, train_data_iterator, wait_for_decision=decision_wait.wait_for_decision) -> None:
    """`wait_for_decision`: the parked wait for the controller's decision (a unit test plays the controller)."""
    started = time.monotonic()
    session.replacement.train_data_iterator = train_data_iterator
    session.communicators.continue_epochs_of_the_job(session)
    wait_for_decision(session, RuntimeError("ARF FINISH"), 0, replacement=True)
    session.thread.reset()
    session.replacement.joined = True
    train_reentry.enter_as_a_resumed_loop(session)
    logger.info("replacement process joined the job at step %d after %.2f s of waiting and repair",
                session.replacement.joined_at, time.monotonic() - started)
