"""A warm spare's rank in Megatron's terms (core/layout/warm_assignment has the launcher's side): whether its
stand-in rank may build the model (data parallelism alone: every rank's model is the same), and taking the
real rank into Megatron's arguments. patches/warm_spare does the rest; process_replacement asks here, at
Megatron's init_process_group, whether the rank must be known before the world is created."""
import torch

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.core.process import cpu_torch
from mindio_adaptor.recovery.session import SESSION

PARTITION_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                   "expert_model_parallel_size")


def runs_ahead(margs, accelerator: bool = None) -> bool:
    """Whether a stand-in rank's model is every rank's model, so the spare may build it before its rank. Not
    on an accelerator: the device is the local rank's (a spare would build on the stand-in's device, and the
    dead rank's device is the only one free), so there the spare takes its rank before Megatron picks one."""
    if accelerator is None:
        accelerator = cpu_torch.accelerator_present()
    config = SESSION.config
    return (not accelerator and config.enable_high_availability and config.enable_worker_reboot
            and all(getattr(margs, size, 1) == 1 for size in PARTITION_SIZES))


def stand_in(margs) -> None:
    """Megatron took the rank from RANK, which a warm spare has not: it parses its arguments as the stand-in."""
    if warm_assignment.provisional():
        megatron_job.set_rank(warm_assignment.stand_in_rank(), margs=margs)


def rank_before_the_world(bound_rank: int) -> int:
    """At Megatron's init_process_group: a spare that must not build its model as a stand-in takes its rank
    now; returns the rank the world is created with."""
    margs = megatron_job.args_if_parsed()
    if not warm_assignment.provisional() or (margs is not None and runs_ahead(margs)):
        return bound_rank
    return adopt("arguments parsed")


def adopt(built_to: str) -> int:
    assignment = warm_assignment.await_assignment()
    if assignment is None:
        warm_assignment.not_needed()
    rank = warm_assignment.adopt(assignment, built_to)
    margs = megatron_job.args_if_parsed()
    if margs is not None:
        megatron_job.set_rank(rank, local_rank=int(assignment["env"].get("LOCAL_RANK", margs.local_rank or 0)))
        if torch.cuda.is_available():  # Megatron set the stand-in's device right before creating the world
            torch.cuda.set_device(margs.local_rank)
    return rank
