"""core/steps/loss_line: whether the repair step's loss line is owed and where its value comes from, the same
on every rank from every rank's report; the book a process keeps of its steps and printed lines."""
from mindio_adaptor.core.steps.loss_line import KEPT_STEPS, LossLineBook, Report, settle


def report(printer=False, printed=4, reduced=None, local=True, world=4, grad_norm=1.5, zeros=0.0, skipped=False,
           interval_s=1.0):
    return Report(printer=printer, highest_printed=printed, reduced=reduced, has_local=local, world_size=world,
                  grad_norm=grad_norm, num_zeros=zeros, skipped=skipped, interval_s=interval_s)


def job(*, printer_printed=4, **last):
    """Four ranks; rank 3 prints the lines."""
    return [report(), report(), report(), report(printer=True, printed=printer_printed, **last)]


def test_a_line_the_printer_printed_is_not_owed():
    assert not settle(5, job(printer_printed=5), log_interval=1).owed
    assert not settle(4, job(printer_printed=5), log_interval=1).owed  # a reload went back before it


def test_a_reduction_some_rank_finished_gives_the_value():
    reports = job()
    reports[0] = report(reduced={"lm loss": 2.5})
    verdict = settle(5, reports, log_interval=1)
    assert verdict.owed and verdict.source == "reduced" and verdict.reduced == {"lm loss": 2.5}
    assert (verdict.grad_norm, verdict.num_zeros, verdict.skipped) == (1.5, 0.0, False)


def test_the_line_s_time_is_the_longest_any_rank_measured_and_none_measured_prints_nothing():
    reports = job()
    reports[0] = report(reduced={"lm loss": 2.5}, interval_s=0.0)  # a replacement's timer never ran
    reports[2] = report(interval_s=3.5)
    assert settle(5, reports, log_interval=1).interval_s == 3.5
    verdict = settle(5, [report(interval_s=0.0) for _ in range(3)] + [report(printer=True, interval_s=0.0)], 1)
    assert verdict.owed and verdict.source is None and "no rank measured the time" in verdict.why_not


def test_an_unfinished_reduction_is_done_again_when_every_rank_holds_its_part():
    reports = job()
    reports[0] = report(grad_norm=None, zeros=None, skipped=None)  # stopped before its update: no norm of its own
    verdict = settle(5, reports, log_interval=1)
    assert verdict.owed and verdict.source == "reduce" and verdict.grad_norm == 1.5


def test_a_part_lost_with_a_replaced_rank_prints_nothing_and_says_which():
    reports = job()
    reports[1] = report(local=False, world=0, grad_norm=None, zeros=None, skipped=None)  # the replacement
    verdict = settle(5, reports, log_interval=1)
    assert verdict.owed and verdict.source is None
    assert "ranks [1] no longer hold their part" in verdict.why_not


def test_parts_from_a_job_of_another_size_are_not_reduced_again():
    reports = [report(world=4), report(printer=True, world=4)]  # a scale-in left two of four
    verdict = settle(5, reports, log_interval=1)
    assert verdict.owed and verdict.source is None and "ranks [0, 1]" in verdict.why_not


def test_a_dead_printer_printed_the_line_if_any_reduction_finished():
    finished = [report(reduced={"lm loss": 2.5}), report(), report()]
    assert not settle(5, finished, log_interval=1).owed
    verdict = settle(5, [report(), report(), report()], log_interval=1)
    assert verdict.owed and verdict.source is None and "printed the losses died" in verdict.why_not


def test_longer_log_intervals_owe_only_their_own_steps_and_cannot_rebuild_the_average():
    assert not settle(5, job(), log_interval=2).owed
    verdict = settle(6, job(printer_printed=4), log_interval=2)
    assert verdict.owed and verdict.source is None and "--log-interval 2" in verdict.why_not


def test_without_any_finished_optimizer_step_there_is_no_gradient_norm_to_print():
    reports = [report(grad_norm=None, skipped=None) for _ in range(3)] + [
        report(printer=True, grad_norm=None, skipped=None)]
    verdict = settle(5, reports, log_interval=1)
    assert verdict.owed and verdict.source is None and "gradient norm" in verdict.why_not


def test_the_book_keeps_the_last_steps_and_a_step_computed_again_starts_afresh():
    book = LossLineBook()
    for step in range(1, KEPT_STEPS + 3):
        book.start(step, 4).reduced = {"lm loss": float(step)}
    assert list(book.steps) == list(range(3, KEPT_STEPS + 3))
    assert book.start(KEPT_STEPS + 2, 4).reduced is None
    book.highest_printed = 5
    assert book.printed_already(5) and not book.printed_already(6)
    assert book.report(99) == Report(False, 5, None, False, 0, None, None, None)  # a step it never computed
