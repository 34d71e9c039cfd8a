"""An evaluation that a fault interrupts leaves nothing of itself behind.

Megatron's evaluate() turns the model to eval mode (no dropout) and switches the rerun state machine's result
validation off, and undoes both only when it completes. A rank that a recovery stops inside it goes on training
after the step it had completed, so both are undone here when evaluate() raises. Left as they were, the model would
train on without dropout, unlike the uninterrupted run, and the rank would skip the rerun machine's all_reduce at
the start of each step, which a replacement process (validation on) makes: the job hung there. (The timer
evaluate() started is stopped by the rollback, as an interrupted step's are.)

The interrupted evaluation prints no validation line. Its samples count as read: the validation position moves to
where the completed evaluation would have left it and the validation iterator starts again there, so the next
evaluation reads the batches the uninterrupted run's reads (a replacement process receives that position from its
replica peer)."""
import logging

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.megatron.call_arguments import argument, has_parameter
from mindio_adaptor.patches.patch import Patch

logger = logging.getLogger(__name__)


def _evaluation_undone_when_interrupted(wrapped, instance, args, kwargs):
    rerun_mode, first_sample = megatron_job.rerun_mode(), megatron_job.valid_position()
    try:
        return wrapped(*args, **kwargs)
    except BaseException:
        for module in argument(wrapped, args, kwargs, "model"):
            module.train()
        megatron_job.set_rerun_mode(rerun_mode)
        eval_iters = argument(wrapped, args, kwargs, "eval_iters") if has_parameter(wrapped, "eval_iters") else None
        _count_as_read(argument(wrapped, args, kwargs, "data_iterator"), first_sample, eval_iters)
        raise


def _count_as_read(data_iterator, first_sample: int, eval_iters) -> None:
    if getattr(megatron_job.args(), "full_validation", False):  # each evaluation starts its loader from the start
        return
    megatron_job.set_valid_position(first_sample + megatron_job.evaluation_samples(eval_iters))
    megatron_job.position_valid_iterators(data_iterator, "after an interrupted evaluation")
    logger.warning("evaluation interrupted by a fault: no validation line for it; the next one reads from sample %d, "
                   "as after the whole evaluation", megatron_job.valid_position())


PATCHES = [Patch("megatron.training.training", "evaluate", _evaluation_undone_when_interrupted)]
