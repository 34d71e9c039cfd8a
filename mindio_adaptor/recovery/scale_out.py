"""What a scale-out (elastic training, docs/elastic.md) changes in Megatron: the sizes of the job's
start again. A survivor of the scale-in takes back its original rank, world size and data-parallel size,
and Megatron's micro-batch calculator its micro-batch count, with the same global batch size. A returned
process started at the original sizes and keeps them. A partial scale-out (some retired ranks stay absent)
takes every rank to the sizes of a scale-in from the start without the absent ranks' slices instead
(core/layout/scale_out_plan). The model, DDP wrapper, optimizer and scheduler are built again and loaded the
way the scale-in does it (megatron/rebuild); the sizes change through megatron/sizes."""
from typing import Iterable, Tuple

from mindio_adaptor.core.layout.replica_layout import ATTENTION
from mindio_adaptor.core.layout.scale_in_plan import ScaleInPlan
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutPlan, ScaleOutRefused, plan_partial_return, plan_scale_out


def plan_for(margs, scale_in_plan, returned, absent: Iterable[int] = ()) -> ScaleOutPlan:
    """The way back from the scale-in this rank took part in, once `returned` (original ranks) are back and
    `absent` ones are not (a partial scale-out where there are any)."""
    if scale_in_plan is None:
        raise ScaleOutRefused(f"asked to take back ranks {sorted(returned)}, but this rank never scaled in")
    return plan_scale_out(scale_in_plan, returned, margs.global_batch_size, margs.micro_batch_size, absent,
                          margs.expert_model_parallel_size)


def partial_target_of_returned(margs, layout, returned, absent) -> Tuple[ScaleInPlan, str]:
    """A returned process's view of a partial scale-out: the job's plan from its start afterwards, planned on
    the start's data-parallel lists it was built with, as the survivors plan it on theirs; and why nobody
    joins, where nobody can (core/layout/scale_out_plan.plan_partial_return)."""
    if layout is None:
        raise ScaleOutRefused(f"returned process of rank {margs.rank} has no replica layout to plan the partial "
                              f"scale-out without ranks {sorted(absent)} on")
    dense = layout.sets_of(ATTENTION)
    return plan_partial_return([s.rank_list for s in dense], absent, returned, margs.global_batch_size,
                               margs.micro_batch_size, dense[0].replica_cnt, margs.expert_model_parallel_size)


def from_replicas(config) -> bool:
    """Whether the scale-out takes the state from the survivors' memory (recovery/resize_from_replicas), not
    from a checkpoint they save (`--elastic-scale-out-from`)."""
    return config.elastic_scale_out_from == "replicas"
