"""What a scale-out (elastic training, docs/elastic.md) changes in Megatron: the sizes of the job's
start again. A survivor of the scale-in takes back its original rank, world size and data-parallel size,
and Megatron's micro-batch calculator its micro-batch count, with the same global batch size. A returned
process started at the original sizes and keeps them. The model, DDP wrapper, optimizer and scheduler
are built again and loaded the way the scale-in does it (patches/scale_in.rebuild_from_checkpoint)."""
from mindio_adaptor.core.scale_out_plan import ScaleOutPlan, ScaleOutRefused, plan_scale_out
from mindio_adaptor.patches import megatron_job


def plan_for(scale_in_plan, returned) -> ScaleOutPlan:
    """The way back from the scale-in this rank took part in, once `returned` (original ranks) are back."""
    if scale_in_plan is None:
        raise ScaleOutRefused(f"asked to take back ranks {sorted(returned)}, but this rank never scaled in")
    margs = megatron_job.args()
    return plan_scale_out(scale_in_plan, returned, margs.global_batch_size, margs.micro_batch_size)


def take_original_rank(plan: ScaleOutPlan) -> int:
    """A survivor's arguments at its original rank and world (before the world is rebuilt on them);
    returns the rank it had in the scaled-in job."""
    margs = megatron_job.args()
    current = margs.rank
    margs.rank, margs.world_size = plan.original_rank(current), plan.world_size
    return current


def apply_original_sizes(plan: ScaleOutPlan) -> None:
    """Megatron's data-parallel size and micro-batch calculator at the original size."""
    from megatron.core.num_microbatches_calculator import get_num_microbatches, reconfigure_num_microbatches_calculator

    margs = megatron_job.args()
    margs.data_parallel_size = plan.new_dp
    reconfigure_num_microbatches_calculator(margs.rank, None, margs.global_batch_size, margs.micro_batch_size,
                                            plan.new_dp, seq_length=margs.seq_length)
    if get_num_microbatches() != plan.num_microbatches:
        raise ScaleOutRefused(f"Megatron's calculator gives {get_num_microbatches()} micro-batches at "
                              f"dp{plan.new_dp}, the plan {plan.num_microbatches}")
