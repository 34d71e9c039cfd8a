"""patches/loss_lines around Megatron's training_log: the printer prints a step's line once, however often
the step is computed and logged (a reload from a checkpoint computes steps again); every rank notes what
it computed of a step (its micro-batch losses, the reduced losses, the optimizer step's norm)."""
import pytest
import torch

from mindio_adaptor.core.steps.loss_line import LossLineBook
from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.patches import loss_lines
from mindio_adaptor.recovery.session import SESSION


@pytest.fixture
def printer(monkeypatch):
    monkeypatch.setattr(SESSION, "losses", LossLineBook())
    monkeypatch.setattr(megatron_job, "is_last_rank", lambda: True)
    monkeypatch.setattr(megatron_job, "prints_loss_line", lambda step, first=False: True)
    monkeypatch.setattr(megatron_job, "world_size", lambda: 4)
    return SESSION.losses


def log(step, printed):
    """Megatron's training_log of `step`, whose print_rank_last appends to `printed`."""
    def training_log(loss_dict, total_loss_dict, learning_rate, iteration, *args, **kwargs):  # 0.19's leading ones
        loss_lines._print_unless_printed(lambda line: printed.append(line), None, (f"iteration {step}",), {})

    loss_lines._training_log_once(training_log, None, (None, None, None, step), {})


def test_a_step_logged_again_is_printed_once(printer):
    printed = []
    for step in (3, 4, 5, 4, 5, 6):  # a fault at 6, the checkpoint of 3 reloaded, 4 and 5 computed again
        log(step, printed)
    assert printed == ["iteration 3", "iteration 4", "iteration 5", "iteration 6"]
    assert printer.printer and printer.highest_printed == 6 and printer.line_step is None


def test_other_prints_pass_untouched(printer):
    printed = []
    printer.highest_printed = 9
    loss_lines._print_unless_printed(lambda line: printed.append(line), None, ("validation loss",), {})
    assert printed == ["validation loss"]


def test_a_train_step_records_its_losses_norm_and_reduced_value(printer, monkeypatch):
    monkeypatch.setattr(megatron_job, "current_iteration", lambda: 7)
    micro_batches = [{"lm loss": torch.tensor([6.0, 2.0])}, {"lm loss": torch.tensor([3.0, 1.0])}]

    def train_step(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler, config,
                   forward_backward_func, iteration=None):  # 0.19's parameters
        losses = forward_backward_func()
        loss_lines.note_update(7, (True, 1.25, 0.0))
        assert losses is micro_batches
        return {"lm loss": torch.tensor(3.0)}, 0, False, False, 0, 1.25, 0.0, 0

    loss_lines._recording_train_step(train_step, None, (None,) * 6 + (lambda: micro_batches,), {})
    record = printer.steps[7]
    assert [{k: v.tolist() for k, v in mb.items()} for mb in record.local] == [{"lm loss": [6.0, 2.0]},
                                                                                {"lm loss": [3.0, 1.0]}]
    assert record.reduced == {"lm loss": 3.0} and record.world_size == 4
    assert (record.grad_norm, record.num_zeros, record.skipped) == (1.25, 0.0, False)
