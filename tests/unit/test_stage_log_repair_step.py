"""stages/log_repair_step: at the rollback every rank reports what it knows of the repair step's loss line;
an owed line is Megatron's training_log on every rank, from the value a rank holds or the reduction done
again; a lost value prints nothing and the printer says why."""
import logging

from recovery_fakes import FakeMegatron, action, session_at
from mindio_adaptor.core.steps.loss_line import Report
from mindio_adaptor.recovery.stages.log_repair_step import LOG_REPAIR_STEP, log_repair_step


class JobOfFour(FakeMegatron):
    """This rank (the printer, rank 3) among three others whose reports the test gives."""

    def __init__(self, others, last_rank=True):
        super().__init__(log_interval=1)
        self.others, self.last_rank = others, last_rank

    def gather_objects(self, obj):
        self._record("gather_objects", obj)
        return [*self.others, obj]

    def is_last_rank(self):
        return self.last_rank

    def reduce_step_losses(self, model, local):
        self._record("reduce_step_losses", local)
        return {"lm loss": 2.25}

    def interval_seconds(self):
        return 1.25

    def log_step_line(self, model, optimizer, step, reduced, verdict):
        self._record("log_step_line", step, reduced, verdict.grad_norm, verdict.num_zeros, verdict.skipped,
                     verdict.interval_s)


def other(reduced=None, local=True):
    return Report(printer=False, highest_printed=4, reduced=reduced, has_local=local, world_size=4, grad_norm=1.5,
                  num_zeros=0.0, skipped=False, interval_s=0.5)


def printer_at(step=4):
    session = session_at(5)
    book = session.losses
    book.printer, book.highest_printed = True, step
    record = book.start(5, 4)
    record.local, record.grad_norm, record.num_zeros, record.skipped = ["micro-batch losses"], 1.5, 0.0, False
    return session


def rollback(step=5):
    return action("rollback", strategy="retry", step=step)


def test_an_unfinished_reduction_is_done_again_and_logged_by_megatron_on_every_rank():
    session, megatron = printer_at(), JobOfFour([other(), other(), other()])
    assert log_repair_step(session, megatron, rollback()) == 0
    assert megatron.called("reduce_step_losses") == [(["micro-batch losses"],)]
    # the line's time: the longest any rank measured since the previous line (this rank's 1.25 s)
    assert megatron.called("log_step_line") == [(5, {"lm loss": 2.25}, 1.5, 0.0, False, 1.25)]
    assert LOG_REPAIR_STEP.on_training_thread


def test_a_value_a_rank_holds_is_logged_without_a_reduction():
    session, megatron = printer_at(), JobOfFour([other(reduced={"lm loss": 2.5}), other(), other()])
    log_repair_step(session, megatron, rollback())
    assert megatron.names() == ["gather_objects", "log_step_line"]
    assert megatron.called("log_step_line")[0][1] == {"lm loss": 2.5}


def test_a_line_already_printed_is_not_printed_again():
    session, megatron = printer_at(step=5), JobOfFour([other(), other(), other()])
    log_repair_step(session, megatron, rollback())
    assert megatron.names() == ["gather_objects"]


def test_a_lost_value_prints_nothing_and_the_printer_says_why(caplog):
    session, megatron = printer_at(), JobOfFour([other(), other(local=False), other()])
    with caplog.at_level(logging.WARNING):
        log_repair_step(session, megatron, rollback())
    assert megatron.names() == ["gather_objects"]
    assert "step 5: its loss line is not printed: the step's losses were not reduced before the fault and ranks " \
           "[1] no longer hold their part of them" in caplog.text
