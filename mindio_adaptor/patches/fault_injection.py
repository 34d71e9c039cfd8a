"""MINDIO_FAULT_INJECT inside Megatron: read and checked with the arguments (a malformed spec stops
the run at start), fired at the forward, backward and optimizer phases of the planned step, once its
update is final (completed: a flip changes this rank's optimizer shard there), in its training_log before
the line (line), in the evaluation after it (eval), inside a checkpoint save of that iteration (before and
after this rank writes its files), and when the process exits."""
import functools
import os

import torch.distributed as dist

from mindio_adaptor.core.detection.fault_inject import FaultPlan
from mindio_adaptor.megatron import current_iteration, shard_tensors
from mindio_adaptor.megatron.call_arguments import argument
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

# The rank's own process: an asynchronous save writes its files in a worker process, which must not fire.
_rank_pid = None


def _read_plan(wrapped, instance, args, kwargs):
    global _rank_pid
    margs = args[0] if args else kwargs["args"]
    plan = FaultPlan.from_env()
    plan.check_world_size(margs.world_size)
    SESSION.job.fault_plan = plan
    _rank_pid = os.getpid()
    if plan and _fire_optimizer_phase not in SESSION.job.before_optimizer_step:
        SESSION.job.before_optimizer_step.append(_fire_optimizer_phase)
        SESSION.job.before_leaving.append(_fire_exit_phase)
        SESSION.job.step_completed.append(_fire_completed_phase)
    return wrapped(*args, **kwargs)


def fire(phase: str, step: int, shard=None):
    if SESSION.job.fault_plan:
        # At exit the process groups may be destroyed already (the example does so after main()).
        rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
        SESSION.job.fault_plan.maybe_fire(rank, step, phase, shard)


def _fire_optimizer_phase(step: int):
    fire("optimizer", step)


def _fire_completed_phase(step: int):
    fire("completed", step, lambda: shard_tensors(SESSION.job.optimizer))


def _fire_exit_phase():
    fire("exit", current_iteration())


def _save_with_faults(wrapped, instance, args, kwargs):
    if SESSION.job.fault_plan:
        fire("save", current_iteration())
    return wrapped(*args, **kwargs)


def _written_with_faults(wrapped, instance, args, kwargs):
    save_fn, preload_fn, save_args = wrapped(*args, **kwargs)
    if save_fn is None or not SESSION.job.fault_plan:
        return save_fn, preload_fn, save_args
    # A module-level function in a partial: an asynchronous save pickles it for its worker process.
    return functools.partial(_write_then_fire, save_fn), preload_fn, save_args


def _write_then_fire(save_fn, *args, **kwargs):
    result = save_fn(*args, **kwargs)
    if os.getpid() == _rank_pid:
        fire("written", current_iteration())
    return result


def _forward_with_faults(wrapped, instance, args, kwargs):
    if not SESSION.job.fault_plan:
        return wrapped(*args, **kwargs)
    forward_step_func, *rest = args

    def forward_step(*f_args, **f_kwargs):
        fire("forward", current_iteration())
        return forward_step_func(*f_args, **f_kwargs)

    return wrapped(forward_step, *rest, **kwargs)


def _evaluate_with_faults(wrapped, instance, args, kwargs):
    """phase=eval: in the first forward of the evaluation after the step (step N: the one after step N's update)."""
    if not SESSION.job.fault_plan:
        return wrapped(*args, **kwargs)
    forward_step_func, *rest = args  # evaluate()'s first parameter, passed by position in 0.12 to 0.19

    def forward_step(*f_args, **f_kwargs):
        fire("eval", current_iteration())
        return forward_step_func(*f_args, **f_kwargs)

    return wrapped(forward_step, *rest, **kwargs)


def _training_log_with_faults(wrapped, instance, args, kwargs):
    if SESSION.job.fault_plan:
        fire("line", argument(wrapped, args, kwargs, "iteration"))
    return wrapped(*args, **kwargs)


def _backward_with_faults(wrapped, instance, args, kwargs):
    if SESSION.job.fault_plan:
        fire("backward", current_iteration())
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch("megatron.training.arguments", "validate_args", _read_plan),
    Patch("megatron.training.training", "train_step", _forward_with_faults),
    Patch("megatron.training.training", "evaluate", _evaluate_with_faults),
    Patch("megatron.training.training", "training_log", _training_log_with_faults),
    Patch("megatron.core.pipeline_parallel.schedules", "backward_step", _backward_with_faults),
    # Only for tests and demos: a user's patched Megatron tree needs no hook inside the save.
    Patch("megatron.core.dist_checkpointing", "save", _save_with_faults, upstream=False),
    Patch("megatron.core.dist_checkpointing.strategies.filesystem_async",
          "FileSystemWriterAsync.get_save_function_and_args", _written_with_faults, upstream=False),
]
