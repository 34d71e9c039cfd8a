"""ROLLBACK's stage after the roll-back, on every rank: the repair step's loss line, where no rank printed it before
the fault and no rank computes the step again (core/steps/loss_line decides, from what every rank reports). The line is
Megatron's own (training_log, which has collectives: every rank calls it), from the reduced losses a rank holds or
the reduction done again from every rank's part; where the value is lost, the printer says why instead."""
import logging

from mindio_adaptor.core.steps.loss_line import settle
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def log_repair_step(session, megatron, action) -> int:
    step, book, job = action.step, session.losses, session.job
    reports = megatron.gather_objects(book.report(step, megatron.interval_seconds()))
    verdict = settle(step, reports, megatron.args().log_interval)
    if not verdict.owed:
        return 0
    if verdict.source is None:
        if megatron.is_last_rank():
            logger.warning("step %d: its loss line is not printed: %s", step, verdict.why_not)
        return 0
    reduced = verdict.reduced
    if verdict.source == "reduce":
        reduced = megatron.reduce_step_losses(job.model, book.steps[step].local)
    megatron.log_step_line(job.model, job.optimizer, step, reduced, verdict)
    if megatron.is_last_rank():
        how = "reduced before the fault" if verdict.source == "reduced" else "reduced again from every rank's part"
        logger.info("step %d: loss line printed after the recovery (%s)", step, how)
    return 0


LOG_REPAIR_STEP = Stage("log the repair step", log_repair_step)
