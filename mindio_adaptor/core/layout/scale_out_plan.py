"""Elastic training's scale-out, as plain data: the job that a scale-in left at a smaller data-parallel
size grows back when the ranks it retired return (docs/elastic.md).

The whole way back: every rank the scale-in retired (lost or dropped with its slice) returned, so the job is
the one it started as again, with its first ranks, replica layout and micro-batch count. A surviving rank
takes back its original rank (the scale-in numbered the survivors densely, in order).

Part of the way (a partial scale-out): the controller waited MINDIO_SCALE_OUT_WAIT_S for the rest and starts
with the returned ranks that are ready, naming the ranks still absent (csrc/controller/scale_out.h). The job
then grows to the size at which only the absent ranks' data-parallel slices are missing: planned as a
scale-in from the job's start without them (`plan_partial_return`), which every rank computes alike, the
survivors from their plan's start lists, a returned process from its own. A returned rank whose slice has
an absent rank cannot train without it and leaves again (it is no survivor of the plan). Where the experts cannot sit
at that size (expert parallelism), nobody joins and the job stays at its size. The result is again a plan
from the start, so a later scale-out, whole or partial, or a second scale-in goes on from it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence, Tuple

from mindio_adaptor.core.layout.scale_in_plan import (ScaleInPlan, ScaleInRefused, plan_scale_in, refuse_expert_misfit,
                                                      replicas_at)


class ScaleOutRefused(RuntimeError):
    """The job cannot grow back now; the message says why, with the ranks and sizes."""


@dataclass(frozen=True)
class ScaleOutPlan:
    returned: Tuple[int, ...]  # original ranks that come back
    survivors: Tuple[int, ...]  # original ranks of those that trained on; a survivor's current rank is its index
    old_dp: int  # the smaller size the job trained at
    new_dp: int  # the original size it grows back to
    world_size: int  # the original world
    num_microbatches: int  # per rank and step at the original size
    replicas: int = 1  # the optimizer's replica count R at the original size (a scale-in may have lowered it)
    old_replicas: int = 1  # R at the smaller size
    target: Optional[ScaleInPlan] = None  # partial: the job's plan from its start afterwards (plan_partial_return)
    refused: str = ""  # partial: why nobody could join (the job stays at its size)

    @property
    def partial(self) -> bool:
        return self.target is not None

    def replicas_text(self) -> str:
        """R back to the original count, when the scale-in had lowered it (dp2 R=2 -> dp1 R=1 -> dp2 R=2)."""
        if self.replicas == self.old_replicas:
            return ""
        return f"; optimizer replicas R={self.old_replicas} -> R={self.replicas}"

    def original_rank(self, current_rank: int) -> int:
        if not 0 <= current_rank < len(self.survivors):
            raise ScaleOutRefused(f"rank {current_rank} is no rank of the scaled-in job ({len(self.survivors)} "
                                  f"ranks)")
        return self.survivors[current_rank]

    def describe(self) -> str:
        if not self.partial:
            return (f"dp{self.old_dp} -> dp{self.new_dp} (ranks {list(self.returned)} returned; "
                    f"{self.num_microbatches} micro-batches each{self.replicas_text()})")
        target = self.target
        shares = target.split.describe() if target.split else f"{target.num_microbatches} micro-batches each"
        return (f"dp{self.old_dp} -> dp{self.new_dp} of dp{target.old_dp} (ranks {list(self.returned)} returned; "
                f"ranks {sorted(set(target.lost) | set(target.dropped))} stay out; {shares}{self.replicas_text()})")


def plan_scale_out(scale_in: ScaleInPlan, returned: Iterable[int], global_batch_size: int,
                   micro_batch_size: int, absent: Iterable[int] = (), expert_parallel: int = 1) -> ScaleOutPlan:
    """The way back from `scale_in` once `returned` (original ranks) are back, all of it where no retired rank
    is `absent`; raises ScaleOutRefused unless the two are exactly the ranks it retired."""
    returned, absent = set(returned), set(absent)
    retired = set(scale_in.lost) | set(scale_in.dropped)
    if absent:
        return _plan_partial(scale_in, returned, absent, retired, global_batch_size, micro_batch_size,
                             expert_parallel)
    if returned != retired:
        raise ScaleOutRefused(f"a scale-out takes back every rank the scale-in ({scale_in.describe()}) retired, "
                              f"{sorted(retired)}; the controller names {sorted(returned)}")
    per_step = micro_batch_size * scale_in.old_dp
    if global_batch_size % per_step:  # the job ran with it, so only a changed batch size gets here
        raise ScaleOutRefused(f"the global batch size {global_batch_size} is not a multiple of micro-batch size "
                              f"{micro_batch_size} x dp{scale_in.old_dp} = {per_step}")
    return ScaleOutPlan(tuple(sorted(returned)), scale_in.survivors, scale_in.new_dp, scale_in.old_dp,
                        len(scale_in.survivors) + len(retired), global_batch_size // per_step, scale_in.old_replicas,
                        scale_in.new_replicas)


def _plan_partial(scale_in: ScaleInPlan, returned: set, absent: set, retired: set, global_batch_size: int,
                  micro_batch_size: int, expert_parallel: int) -> ScaleOutPlan:
    if returned & absent or returned | absent != retired:
        raise ScaleOutRefused(f"a partial scale-out names every rank the scale-in ({scale_in.describe()}) retired, "
                              f"{sorted(retired)}, once, as returned or absent; the controller names returned "
                              f"{sorted(returned)} and absent {sorted(absent)}")
    if not scale_in.start_dp_lists:
        raise ScaleOutRefused(f"the scale-in ({scale_in.describe()}) keeps no data-parallel lists of the start to "
                              f"plan a partial scale-out on")
    target, refused = plan_partial_return(scale_in.start_dp_lists, absent, returned, global_batch_size,
                                          micro_batch_size, scale_in.old_replicas, expert_parallel)
    joining = tuple(r for r in sorted(returned) if r in target.survivors)
    return ScaleOutPlan(joining, scale_in.survivors, scale_in.new_dp, target.new_dp,
                        len(scale_in.survivors) + len(retired), target.num_microbatches, target.new_replicas,
                        scale_in.new_replicas, target, refused)


def plan_partial_return(start_dp_lists: Sequence[Sequence[int]], absent: Iterable[int], returned: Iterable[int],
                        global_batch_size: int, micro_batch_size: int, replicas: int,
                        expert_parallel: int = 1) -> Tuple[ScaleInPlan, str]:
    """The job's plan from its start once `returned` ranks are back and `absent` ones are not: a scale-in from
    the start without the absent ranks' slices, at the start's replica count R where the new size allows it.
    Where the experts cannot sit at that size, nobody joins: the plan without the returned ranks either, and
    why. Returns (plan, why nobody joins or "")."""
    absent, returned = set(absent), set(returned)
    try:
        return _return_plan(start_dp_lists, absent, global_batch_size, micro_batch_size, replicas,
                            expert_parallel), ""
    except ScaleInRefused as why:
        return _return_plan(start_dp_lists, absent | returned, global_batch_size, micro_batch_size, replicas,
                            expert_parallel), str(why)


def _return_plan(start_dp_lists, out: set, global_batch_size: int, micro_batch_size: int, replicas: int,
                 expert_parallel: int) -> ScaleInPlan:
    plan = plan_scale_in(start_dp_lists, out, global_batch_size, micro_batch_size)
    plan = replace(plan, old_replicas=replicas, new_replicas=replicas_at(plan.new_dp, replicas, expert_parallel))
    refuse_expert_misfit(expert_parallel, plan)
    return plan
