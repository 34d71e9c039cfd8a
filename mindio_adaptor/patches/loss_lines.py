"""Each step's loss line printed once, recoveries included (core/steps/loss_line says which line is owed).

On every rank, per step: the micro-batch losses train_step's forward-backward returns (this rank's part,
before the data-parallel reduction), the optimizer step's gradient norm, zeros and skip, and the reduced
losses train_step returns once the reduction finished. Around Megatron's training_log: whether this
process is the printer (the last rank), and the last step whose line it printed; a line of a step printed
already (computed again after a reload from a checkpoint) is dropped. The rollback's last stage
(stages/log_repair_step) prints the repair step's line where it is owed.
"""
from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.steps.step_path_costs import COSTS
from mindio_adaptor.megatron.call_arguments import argument, has_parameter, with_argument
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

# The record of the step train_step runs, for a forward-backward it looks up itself (megatron-core 0.12; later
# versions pass the function to train_step)
_running = {"record": None}


def note_update(step: int, result) -> None:
    """The optimizer step's (update_successful, grad_norm, num_zeros_in_grad) of `step` on this rank."""
    if isinstance(result, tuple) and len(result) == 3:
        record = SESSION.losses.record(step)
        successful, grad_norm, num_zeros = result
        record.skipped = not successful
        record.grad_norm = None if grad_norm is None else float(grad_norm)
        record.num_zeros = None if num_zeros is None else float(num_zeros)


def _recording_train_step(wrapped, instance, args, kwargs):
    preparing = COSTS.clock()
    step = megatron_job.current_iteration()
    record = SESSION.losses.start(step, megatron_job.world_size())
    if has_parameter(wrapped, "forward_backward_func"):
        forward_backward = argument(wrapped, args, kwargs, "forward_backward_func")
        args, kwargs = with_argument(wrapped, args, kwargs, "forward_backward_func",
                                     _keeping_losses(forward_backward, record))
    _running["record"] = record
    COSTS.add("loss lines", COSTS.clock() - preparing)
    try:
        result = wrapped(*args, **kwargs)
    finally:
        _running["record"] = None
    keeping = COSTS.clock()
    if isinstance(result, tuple) and result and isinstance(result[0], dict) and result[0]:
        record.reduced = {key: float(value) for key, value in result[0].items()}
    COSTS.add("loss lines", COSTS.clock() - keeping)
    return result


def _keeping_losses(forward_backward, record):
    def forward_backward_kept(*args, **kwargs):
        losses = forward_backward(*args, **kwargs)
        keeping = COSTS.clock()
        record.local = megatron_job.detached_losses(losses)
        COSTS.add("loss lines", COSTS.clock() - keeping)
        return losses

    return forward_backward_kept


def _forward_backward_kept(wrapped, instance, args, kwargs):
    """train_step's own lookup of the forward-backward function (megatron-core 0.12)."""
    forward_backward = wrapped(*args, **kwargs)
    record = _running["record"]
    return forward_backward if record is None else _keeping_losses(forward_backward, record)


def _training_log_once(wrapped, instance, args, kwargs):
    book = SESSION.losses
    step = argument(wrapped, args, kwargs, "iteration")
    book.printer = megatron_job.is_last_rank()
    book.line_step = step
    try:
        result = wrapped(*args, **kwargs)
    finally:
        book.line_step = None
    if megatron_job.prints_loss_line(step, kwargs.get("is_first_iteration", False)):
        book.highest_printed = max(book.highest_printed, step)
    return result


def _print_unless_printed(wrapped, instance, args, kwargs):
    """Megatron's print on the last rank; inside training_log, once per step."""
    book = SESSION.losses
    step = book.line_step
    if step is None:
        return wrapped(*args, **kwargs)
    if book.printed_already(step):
        return None
    result = wrapped(*args, **kwargs)
    book.highest_printed = max(book.highest_printed, step)
    return result


PATCHES = [
    Patch("megatron.training.training", "train_step", _recording_train_step),
    Patch("megatron.training.training", "training_log", _training_log_once),
    # a name training imports from megatron.core: no source hook can carry it (upstream=False)
    Patch("megatron.training.training", "get_forward_backward_func", _forward_backward_kept, upstream=False),
    # megatron.training.utils became a package in 0.18
    Patch("megatron.training.utils.common_utils", "print_rank_last", _print_unless_printed, first="0.18"),
    Patch("megatron.training.utils", "print_rank_last", _print_unless_printed, last="0.17"),
]
