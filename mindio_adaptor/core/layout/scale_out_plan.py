"""Elastic training's scale-out, as plain data: the job that a scale-in left at a smaller data-parallel
size grows back to its original size when the ranks it retired return (docs/elastic.md).

Only the whole way back: every rank the scale-in retired (lost or dropped with its slice) must have
returned, so the job is the one it started as again, with its first ranks, replica layout and
micro-batch count; the controller waits for the full set before it starts (csrc/controller/scale_out.h).
A surviving rank takes back its original rank (the scale-in numbered the survivors densely, in order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Tuple

from mindio_adaptor.core.layout.scale_in_plan import ScaleInPlan


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
        return (f"dp{self.old_dp} -> dp{self.new_dp} (ranks {list(self.returned)} returned; "
                f"{self.num_microbatches} micro-batches each{self.replicas_text()})")


def plan_scale_out(scale_in: ScaleInPlan, returned: Iterable[int], global_batch_size: int,
                   micro_batch_size: int) -> ScaleOutPlan:
    """The way back from `scale_in` once `returned` (original ranks) are back; raises ScaleOutRefused
    unless they are exactly the ranks it retired."""
    returned = set(returned)
    retired = set(scale_in.lost) | set(scale_in.dropped)
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
