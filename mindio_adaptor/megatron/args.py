"""Megatron's arguments, iteration, RNG states and rerun state machine, as a recovery reads and sets them."""
import random

import numpy as np
import torch

from mindio_adaptor.core.steps.step_snapshot import StepSnapshot


def args():
    from megatron.training.global_vars import get_args

    return get_args()


def args_if_parsed():
    """Megatron's arguments, or None before it parsed them (get_args() asserts; a DataLoader may
    start before Megatron parses its args)."""
    from megatron.training import global_vars

    return global_vars._GLOBAL_ARGS


def current_iteration() -> int:
    """The iteration being computed, numbered as Megatron's log prints it (1-based). Before train() runs (a
    replacement process joining) 1: megatron-core 0.19 sets curr_iteration to 0 there, 0.12 not at all."""
    return getattr(args(), "curr_iteration", 0) + 1


def set_rank(rank: int, world_size: int = None, local_rank: int = None, margs=None) -> None:
    """Megatron's arguments at this process's rank in a world that changed (a resize, a warm spare taking its
    rank); `margs`: arguments still being parsed, before Megatron holds them."""
    margs = margs if margs is not None else args()
    margs.rank = rank
    if world_size is not None:
        margs.world_size = world_size
    if local_rank is not None:
        margs.local_rank = local_rank


def set_parallel_sizes(data_parallel: int, replicas: int, margs=None) -> None:
    """Megatron's data-parallel size and distributed-optimizer instance count (the replicas) at a resize."""
    margs = margs if margs is not None else args()
    margs.data_parallel_size = data_parallel
    margs.num_distributed_optimizer_instances = replicas


def set_iteration_state(snapshot: StepSnapshot) -> None:
    """Megatron's arguments at the snapshot's step, as a resume from a checkpoint of it sets them."""
    margs = args()
    margs.iteration = snapshot.iteration
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    margs.num_floating_point_operations_so_far = snapshot.floating_point_operations


def valid_position() -> int:
    """The validation samples this rank's evaluations consumed so far (Megatron counts them per evaluation step)."""
    return getattr(args(), "consumed_valid_samples", 0)


def set_valid_position(consumed: int) -> None:
    args().consumed_valid_samples = consumed


def set_data_position(snapshot: StepSnapshot) -> None:
    """The data position and RNG states of the snapshot's step (what a checkpoint of it records)."""
    margs = args()
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    restore_rng(snapshot.rng)


def rng_states() -> dict:
    from megatron.core import tensor_parallel

    return {"random": random.getstate(), "np": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(),
            "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}


def restore_rng(states: dict) -> None:
    from megatron.core import tensor_parallel

    random.setstate(states["random"])
    np.random.set_state(states["np"])
    torch.set_rng_state(states["torch"])
    torch.cuda.set_rng_state(states["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(states["tracker"])


def rerun_mode():
    """The rerun state machine's mode (whether it validates results; evaluation switches it off meanwhile)."""
    from megatron.core.rerun_state_machine import get_rerun_state_machine

    return get_rerun_state_machine().get_mode()


def set_rerun_mode(mode) -> None:
    from megatron.core.rerun_state_machine import get_rerun_state_machine

    get_rerun_state_machine().set_mode(mode)


def evaluation_samples(eval_iters=None) -> int:
    """The validation samples one whole evaluation reads (`eval_iters` batches, default --eval-iters)."""
    margs = args()
    batch = getattr(margs, "eval_global_batch_size", None) or margs.global_batch_size  # the former since 0.14
    return (eval_iters or margs.eval_iters) * batch


def reset_rerun_state() -> None:
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine

    get_rerun_state_machine().state = RerunState.NOT_RUNNING_YET
