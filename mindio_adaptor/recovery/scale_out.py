"""What a scale-out (elastic training, docs/elastic.md) changes in Megatron: the sizes of the job's
start again. A survivor of the scale-in takes back its original rank, world size and data-parallel size,
and Megatron's micro-batch calculator its micro-batch count, with the same global batch size. A returned
process started at the original sizes and keeps them. The model, DDP wrapper, optimizer and scheduler
are built again and loaded the way the scale-in does it (megatron_job/rebuild); the sizes change through
megatron_job/sizes."""
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutPlan, ScaleOutRefused, plan_scale_out


def plan_for(margs, scale_in_plan, returned) -> ScaleOutPlan:
    """The way back from the scale-in this rank took part in, once `returned` (original ranks) are back."""
    if scale_in_plan is None:
        raise ScaleOutRefused(f"asked to take back ranks {sorted(returned)}, but this rank never scaled in")
    return plan_scale_out(scale_in_plan, returned, margs.global_batch_size, margs.micro_batch_size)


def from_replicas(margs) -> bool:
    """Whether the scale-out takes the state from the survivors' memory (recovery/resize_from_replicas), not
    from a checkpoint they save (`--elastic-scale-out-from`)."""
    return margs.elastic_scale_out_from == "replicas"
