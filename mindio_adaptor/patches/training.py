"""Hooks on Megatron's training loop: remember the model and optimizer, complete each step, check the shard holders."""
import logging

import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.steps.step_path_costs import COSTS
from mindio_adaptor.patches import loss_lines, silent_corruption, uneven_batches
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


def _record_model_and_optimizer(wrapped, instance, args, kwargs):
    model, optimizer, scheduler = wrapped(*args, **kwargs)
    # Without the process groups: they are replaced at every rebuild, and a reference kept here would keep
    # the old ones alive to the interpreter's end (recovery/scale_in puts the current ones back).
    SESSION.job.setup_call = (args, {k: (None if k == "pg_collection" else v) for k, v in kwargs.items()})
    SESSION.job.model, SESSION.job.optimizer, SESSION.job.scheduler = model, optimizer, scheduler
    if scheduler is not None:
        scheduler.step = _completing(scheduler.step)
        scheduler.load_state_dict = _loading_from_zero(scheduler.load_state_dict)
    if optimizer is not None:
        optimizer.step = _bracketed(optimizer.step)
        for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
            if hasattr(inner, "step_with_ready_grads"):
                inner.step_with_ready_grads = _update_bracketed(inner.step_with_ready_grads)
    return model, optimizer, scheduler


def _update_bracketed(step_with_ready_grads):
    """The in-place update alone (after the gradient-norm collective, which changes nothing): a
    rank blocked before it still holds the previous step's state intact. SESSION.job.before_update runs
    once per iteration, however many optimizers a chain updates."""

    def update_with_hooks(*args, **kwargs):
        iteration = megatron_job.current_iteration()
        if SESSION.job.updating_iteration != iteration:
            SESSION.job.updating_iteration = iteration
            for hook in SESSION.job.before_update:
                hook(iteration)
        return step_with_ready_grads(*args, **kwargs)

    return update_with_hooks


def _bracketed(step):
    """The optimizer update with the job's before hooks."""

    def step_with_hooks(*args, **kwargs):
        iteration = megatron_job.current_iteration()
        for hook in SESSION.job.before_optimizer_step:
            hook(iteration)
        result = step(*args, **kwargs)
        loss_lines.note_update(iteration, result)
        SESSION.job.scheduler_step_ends = iteration
        return result

    return step_with_hooks


def _completing(scheduler_step):
    """The scheduler's step in train_step, right after the optimizer's, is the iteration's last change
    of state: what follows in train_step reduces the loss for display, over the whole data-parallel
    group. Completing the iteration here lets a replica instance that updated while the other was
    stopped by a fault count its step as done (the repair then goes forward to it). Other calls (the
    scheduler's load_state_dict steps it too) complete nothing."""

    def step_then_complete(*args, **kwargs):
        result = scheduler_step(*args, **kwargs)
        if SESSION.job.scheduler_step_ends == megatron_job.current_iteration():
            complete_step(SESSION.job.scheduler_step_ends)
        return result

    return step_then_complete


def _loading_from_zero(load_state_dict):
    """Megatron's scheduler loads a state by stepping the saved count on top of its own: right in a
    fresh process, a doubled schedule in one that trained. A repair or an online reload loads into a
    trained scheduler, so every load after start-up starts from zero."""

    def load_from_zero(*args, **kwargs):
        scheduler.num_steps = 0
        return load_state_dict(*args, **kwargs)

    scheduler = load_state_dict.__self__
    return load_from_zero


def complete_step(step: int) -> None:
    """SESSION.job.step_completed hooks, once per iteration."""
    SESSION.job.scheduler_step_ends = -1
    if SESSION.job.completed_steps and SESSION.job.completed_steps[-1] == step:
        return
    for hook in SESSION.job.step_completed:
        hook(step)
    SESSION.job.completed_steps.append(step)


def _after_train_step(wrapped, instance, args, kwargs):
    try:
        result = wrapped(*args, **kwargs)
    finally:
        SESSION.job.scheduler_step_ends = -1  # a fault before the scheduler's step: nothing to complete
    margs, step = megatron_job.args(), megatron_job.current_iteration()
    uneven_batches.count_the_whole_batch(margs, result, SESSION.job.scheduler)
    complete_step(step)  # an iteration whose update was skipped (no scheduler step)
    if SESSION.job.completed_steps == [step]:  # this process's first step; not a replacement's (a collective)
        report_optimizer_state_bytes()
    if silent_corruption.check_is_due(step, margs):
        _CHECK_HOLDERS(step, say_agreement=SESSION.config.verify_optimizer_replicas)
    return result


def report_optimizer_state_bytes():
    """Once, after the first step (Adam creates its moments lazily): the bytes of fp32 main params
    and optimizer state each rank keeps, gathered to rank 0 and logged. Views into the model's own
    parameters (the "main params" of fp32 training) cost nothing and are not counted."""
    local = sum(t.numel() * t.element_size() for t in megatron_job.shard_state_tensors(SESSION.job.optimizer)
                if t.dim() > 0 and t._base is None)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    if dist.get_rank() == 0:
        logger.info("optimizer state bytes per rank (fp32 master copies + Adam moments): %s", everyone)


def _recording_the_test_iterator(wrapped, instance, args, kwargs):
    """The test data iterator is pretrain()'s own, used after training: it is kept here so that a resize can
    start it again with the new data-parallel rank and size (with a virtual pipeline, one per model chunk)."""
    iterators = wrapped(*args, **kwargs)
    SESSION.job.test_data_iterators.append(iterators[2])
    return iterators


_CHECK_HOLDERS = COSTS.timed("fingerprints", silent_corruption.check_holders)

PATCHES = [
    Patch("megatron.training.training", "setup_model_and_optimizer", _record_model_and_optimizer),
    Patch("megatron.training.training", "train_step", _after_train_step),
    Patch("megatron.training.training", "build_train_valid_test_data_iterators", _recording_the_test_iterator),
]
