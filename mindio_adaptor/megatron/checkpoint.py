"""Megatron's checkpoints as a recovery uses them: a load of a given step, the dump's save for the full job,
and the asynchronous writer."""
import contextlib
from typing import List

import torch.distributed as dist

from mindio_adaptor.megatron import checkpoint_queue
from mindio_adaptor.megatron.args import args

KEY_RERUN = "rerun_state_machine_state"  # megatron.core.rerun_state_machine's ShardedObject key


class MegatronStateError(RuntimeError):
    pass


def load_checkpoint_of_step(model, optimizer, scheduler, step: int) -> tuple:
    """Megatron's load_checkpoint of the checkpoint of `step` under --save (the reported step, not the
    tracker's); returns (iteration, FLOPs so far)."""
    from megatron.training.checkpointing import load_checkpoint

    margs = args()
    pinned, margs.ckpt_step = getattr(margs, "ckpt_step", None), step
    try:
        return load_checkpoint(model, optimizer, scheduler, load_arg="save")
    finally:
        margs.ckpt_step = pinned


def save_checkpoint_for_full_job(step: int, model, optimizer, scheduler, flops: float, save_dir: str,
                                 members: List[int], world_size: int) -> None:
    """Megatron's save_checkpoint into save_dir, synchronously (the caller publishes it next, and the
    process may exit right after: --async-save would only schedule the write), with the rerun state
    every rank of the full job reads at resume."""
    from megatron.training.checkpointing import save_checkpoint

    margs = args()
    root, async_save = margs.save, margs.async_save
    # This process's earlier saves ended or were abandoned at the fault: what they left in the writer's
    # queue would otherwise become this checkpoint's metadata.
    checkpoint_queue.discard_stale_write_results(f"before the save of step {step}")
    margs.save, margs.async_save = save_dir, False
    try:
        with _rerun_state_for_every_rank(members, world_size), _experts_on_the_current_groups(model):
            save_checkpoint(step, model, optimizer, scheduler, flops, checkpointing_context={})
    finally:
        margs.save, margs.async_save = root, async_save


@contextlib.contextmanager
def _experts_on_the_current_groups(model):
    """Megatron's expert MLPs keep the expert data-parallel group they were built with and number their
    tensors' replicas by this rank in it: in the savers' world a saver of the second optimizer instance
    would write its expert weights as a replica, and nobody the main copy. For the save they take the
    savers' group (Megatron before 0.13 asks parallel_state at the save: nothing to change there)."""
    from megatron.core import parallel_state as ps

    experts = [module for chunk in model for module in chunk.modules()
               if type(module).__module__.endswith("transformer.moe.experts") and hasattr(module, "dp_group")]
    kept = [module.dp_group for module in experts]
    for module in experts:
        module.dp_group = ps.get_expert_data_parallel_group()
    try:
        yield
    finally:
        for module, group in zip(experts, kept):
            module.dp_group = group


def unfinalized_async_saves() -> int:
    """How many asynchronous checkpoint saves this rank scheduled and has not finalized yet."""
    from megatron.training import async_utils

    queue = async_utils._async_calls_queue
    return queue.get_num_unfinalized_calls() if queue is not None else 0


def abort_async_checkpoint_writer() -> None:
    """Megatron's own abort of the checkpoint writer (its worker process is killed); the next save
    makes a new queue and writer."""
    from megatron.training import async_utils

    async_utils._async_calls_queue.close(abort=True)
    async_utils._async_calls_queue = None


@contextlib.contextmanager
def _rerun_state_for_every_rank(members: List[int], world_size: int):
    """Megatron (from 0.13 at the latest) saves its rerun state machine as one object per global rank, and a
    resumed rank reads the one at its own rank: every rank of the job needs one, savers or not. Each saver writes its
    own rank's; the saver of new rank 0 also writes the others' as copies of its own (between steps
    with no rerun pending, which is checked, the objects of all ranks are equal)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine

    machine = get_rerun_state_machine()
    original, interrupted = machine.state_dict, machine.state
    me = dist.get_rank()  # the new rank, in the savers' group
    if interrupted not in (RerunState.NOT_RUNNING_YET, RerunState.INITIAL_RUN):
        raise MegatronStateError(f"a rerun of a step is pending (rerun state {interrupted.name}): its per-rank "
                                 f"state cannot be restored for the ranks that are gone")

    def state_dict_for_the_full_job(*args, **kwargs):
        result = original(*args, **kwargs)
        if result is None or result.get("sharded") is None or len(result["sharded"].global_shape) != 1:
            return result  # megatron-core 0.12: one object per (pp, tp) rank, which the savers have too
        data = result["sharded"].data
        result["sharded"] = ShardedObject(KEY_RERUN, data, (world_size,), (members[me],))
        if me == 0:
            result["mindio_other_ranks"] = [ShardedObject(KEY_RERUN, data, (world_size,), (r,))
                                            for r in range(world_size) if r not in members]
        return result

    # The fault interrupted a step (INITIAL_RUN); the checkpoint is of the step before, when the
    # machine was between steps.
    machine.state_dict, machine.state = state_dict_for_the_full_job, RerunState.NOT_RUNNING_YET
    try:
        yield
    finally:
        machine.state_dict, machine.state = original, interrupted
