"""What a scale-out (elastic training, docs/elastic.md) changes in Megatron: the sizes of the job's
start again. A survivor of the scale-in takes back its original rank, world size and data-parallel size,
and Megatron's micro-batch calculator its micro-batch count, with the same global batch size. A returned
process started at the original sizes and keeps them. The model, DDP wrapper, optimizer and scheduler
are built again and loaded the way the scale-in does it (patches/scale_in.rebuild)."""
from mindio_adaptor.core.scale_out_plan import ScaleOutPlan, ScaleOutRefused, plan_scale_out
from mindio_adaptor.patches import megatron_job, scale_in


def plan_for(scale_in_plan, returned) -> ScaleOutPlan:
    """The way back from the scale-in this rank took part in, once `returned` (original ranks) are back."""
    if scale_in_plan is None:
        raise ScaleOutRefused(f"asked to take back ranks {sorted(returned)}, but this rank never scaled in")
    margs = megatron_job.args()
    return plan_scale_out(scale_in_plan, returned, margs.global_batch_size, margs.micro_batch_size)


def take_original_rank(plan: ScaleOutPlan) -> int:
    """A survivor's arguments at its original rank and world (before the world is rebuilt on them);
    returns the rank it had in the scaled-in job."""
    current = megatron_job.args().rank
    megatron_job.set_rank(plan.original_rank(current), plan.world_size)
    return current


def apply_original_sizes(plan: ScaleOutPlan, init_call: tuple) -> tuple:
    """Megatron's data-parallel size, replica count and micro-batch calculator at the original size;
    returns the job's initialize_model_parallel call with the original replica count."""
    return scale_in.resize(plan.new_dp, plan.replicas, plan.num_microbatches, init_call, ScaleOutRefused)


def from_replicas(margs) -> bool:
    """Whether the scale-out takes the state from the survivors' memory (patches/resize_from_replicas), not
    from a checkpoint they save (`--elastic-scale-out-from`)."""
    return margs.elastic_scale_out_from == "replicas"
