"""What a checkpoint of the last completed step needs beyond model and optimizer: the data position
(consumed and skipped samples), the FLOP count, and every RNG state Megatron saves, taken when each
step's state is final (patches/training: after the scheduler's step). The controller learns that a step completed (tft_end_updating_os) only after this
snapshot exists, so the step it asks the savers to dump always has one; a dump written after a fault
anywhere in the next step restores exactly what an uninterrupted run had after this one."""
import random
import sys
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch



@dataclass
class StepSnapshot:
    iteration: int  # the last completed step, numbered as Megatron's log prints it
    consumed_train_samples: int
    skipped_train_samples: int
    floating_point_operations: float
    rng: dict


LATEST: Optional[StepSnapshot] = None


def require(step: int, purpose: str) -> StepSnapshot:
    """The snapshot of `step`, or an error saying which step this rank has instead."""
    if LATEST is None or LATEST.iteration != step:
        have = "none" if LATEST is None else f"step {LATEST.iteration}"
        raise RuntimeError(f"asked to {purpose} step {step}, but this rank's last consistent snapshot is {have}")
    return LATEST


def set_args(snapshot: StepSnapshot) -> None:
    """Megatron's arguments at the snapshot's step, as a resume from a checkpoint of it sets them."""
    from megatron.training.global_vars import get_args

    margs = get_args()
    margs.iteration = snapshot.iteration
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    margs.num_floating_point_operations_so_far = snapshot.floating_point_operations


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


def _train_loop_flops(default: float) -> float:
    """The train loop keeps its FLOP count in a local (`num_floating_point_operations_so_far` of
    megatron.training.training.train); `args` only has the value the loop started with."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "train" and "num_floating_point_operations_so_far" in frame.f_locals:
            return frame.f_locals["num_floating_point_operations_so_far"]
        frame = frame.f_back
    return default


def take(step: int) -> None:
    """Called when step `step` is complete (its update and scheduler step done), before the train
    loop's bookkeeping, which is reproduced here: the samples of this step are added to the
    data position and its FLOPs (the closed-form count, exact for unpacked sequences) to the total."""
    global LATEST
    from megatron.core.num_microbatches_calculator import (get_current_global_batch_size,
                                                           get_current_running_global_batch_size,
                                                           get_num_microbatches)
    from megatron.core import parallel_state as ps
    from megatron.training.global_vars import get_args
    from megatron.training.training import num_floating_point_operations

    margs = get_args()
    batch = (ps.get_data_parallel_world_size() * getattr(margs, "gtp_weight_remat_size", 1)
             * margs.micro_batch_size * get_num_microbatches())
    skipped = get_current_global_batch_size() - get_current_running_global_batch_size()
    flops = _train_loop_flops(margs.num_floating_point_operations_so_far)
    LATEST = StepSnapshot(step, margs.consumed_train_samples + batch, margs.skipped_train_samples + skipped,
                          flops + num_floating_point_operations(margs, batch), rng_states())
