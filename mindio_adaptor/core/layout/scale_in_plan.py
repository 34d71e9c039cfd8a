"""Elastic training's scale-in, as plain data: which ranks go on after ranks were lost and not replaced,
and at which sizes (docs/elastic.md).

Every TP x PP rank of a data-parallel index that lost a rank leaves with it: a model replica missing a
piece is no replica. The survivors are renumbered densely (the new rank of each is its index among the
survivors, which keeps Megatron's rank order). The global batch size stays what it was: each survivor
takes more micro-batches, so the samples of a step, and the losses, are those of the full job; where the new
size does not divide the step's micro-batches, some take one more, their losses weighed by their shares
(core/layout/uneven_split).

The optimizer's replica count R (Megatron's distributed-optimizer instances) must divide the data-parallel
size. Where it no longer does (dp2 R=2 losing a slice: dp1) R falls to the largest count that does, and
the plan says so: with R = 1 the job has no replica left, and its next fault ends in the dump.

A job already scaled in may scale in again (a second loss at the smaller size): that scale-in is planned on
the smaller job, and `ScaleInPlan.then` makes the two one plan from the job's start, which is what the ranks
keep (recovery/resized_layout numbers ranks by it, a scale-out takes the job back to its start from it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple

from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.uneven_split import UnevenSplit


class ScaleInRefused(RuntimeError):
    """The job cannot go on at a smaller data-parallel size; the message says why, with the sizes."""


@dataclass(frozen=True)
class ScaleInPlan:
    lost: Tuple[int, ...]  # the ranks that were lost and not replaced
    survivors: Tuple[int, ...]  # old global ranks, ascending; a survivor's new rank is its index here
    dropped: Tuple[int, ...]  # alive ranks of a data-parallel slice that lost a rank
    lost_dp_indices: Tuple[int, ...]
    old_dp: int
    new_dp: int
    num_microbatches: int  # per survivor and step at the new data-parallel size (the most, where uneven)
    old_replicas: int = 1  # the optimizer's replica count R before and after
    new_replicas: int = 1
    split: Optional[UnevenSplit] = None  # the step's micro-batches among the survivors (core/layout/uneven_split)
    # the data-parallel rank lists of the job this plan starts from (a partial scale-out plans on them again)
    start_dp_lists: Tuple[Tuple[int, ...], ...] = ()

    @property
    def uneven(self) -> bool:
        return self.split is not None and not self.split.even

    def new_rank(self, old_rank: int) -> int:
        if old_rank not in self.survivors:
            raise ScaleInRefused(f"rank {old_rank} does not survive the scale-in (survivors "
                                 f"{list(self.survivors)})")
        return self.survivors.index(old_rank)

    def then(self, second: "ScaleInPlan") -> "ScaleInPlan":
        """This scale-in followed by `second`, planned in this one's numbering (its ranks are this plan's new
        ranks, its sizes this plan's new ones), as one scale-in from the job's start: ranks in the start's
        numbering, every rank retired by either, the start's sizes before and `second`'s after. A scale-out
        from the result takes the job back to its start."""
        start_of = self.survivors  # a current rank's start rank is its index here
        dp_indices = [i for i in range(self.old_dp) if i not in self.lost_dp_indices]
        lost = set(self.lost) | {start_of[r] for r in second.lost}
        dropped = set(self.dropped) | {start_of[r] for r in second.dropped}
        return ScaleInPlan(tuple(sorted(lost)), tuple(start_of[r] for r in second.survivors),
                           tuple(sorted(dropped)),
                           tuple(sorted(set(self.lost_dp_indices) | {dp_indices[i] for i in second.lost_dp_indices})),
                           self.old_dp, second.new_dp, second.num_microbatches, self.old_replicas,
                           second.new_replicas, second.split, self.start_dp_lists)

    def describe(self) -> str:
        shares = self.split.describe() if self.split else f"{self.num_microbatches} micro-batches each"
        return (f"dp{self.old_dp} -> dp{self.new_dp} (data-parallel indices {list(self.lost_dp_indices)} lost "
                f"a rank; survivors {list(self.survivors)}, {shares}{self.describe_replicas()})")

    def describe_replicas(self) -> str:
        if self.new_replicas == self.old_replicas:
            return ""
        if self.new_replicas == 1:
            return (f"; optimizer replicas R={self.old_replicas} -> R=1: the job has no replica now, its next "
                    f"fault ends in the dump")
        return f"; optimizer replicas R={self.old_replicas} -> R={self.new_replicas}"


def plan_scale_in(dp_lists: Sequence[Sequence[int]], lost: Iterable[int], global_batch_size: int,
                  micro_batch_size: int, layout: Optional[ReplicaLayout] = None,
                  expert_parallel: int = 1) -> ScaleInPlan:
    """The scale-in after `lost` ranks are gone, from Megatron's data-parallel rank lists (one per TP x
    PP position, each in data-parallel order); raises ScaleInRefused when the job cannot go on. With
    expert parallelism the replica count must also divide the new expert data-parallel size."""
    lost = set(lost)
    old_dp = len(dp_lists[0])
    index_of = {rank: i for ranks in dp_lists for i, rank in enumerate(ranks)}
    unknown = sorted(lost - set(index_of))
    if unknown:
        raise ScaleInRefused(f"lost ranks {unknown} are in no data-parallel rank list")
    lost_indices = sorted({index_of[rank] for rank in lost})
    new_dp = old_dp - len(lost_indices)
    if new_dp < 1:
        raise ScaleInRefused(f"every data-parallel index (dp{old_dp}) lost a rank: nothing is left to go on with")
    leaving = {rank for ranks in dp_lists for i, rank in enumerate(ranks) if i in lost_indices}
    survivors = tuple(sorted(set(index_of) - leaving))
    split = split_at(new_dp, global_batch_size, micro_batch_size, old_dp)
    old_replicas = new_replicas = 1
    if layout is not None:
        check_every_shard_survives(layout, survivors)
        old_replicas = layout.sets[0].replica_cnt
        new_replicas = replicas_at(new_dp, old_replicas, expert_parallel)
    return ScaleInPlan(tuple(sorted(lost)), survivors, tuple(sorted(leaving - lost)), tuple(lost_indices), old_dp, new_dp,
                       split.microbatches(0), old_replicas, new_replicas, split,
                       tuple(tuple(int(r) for r in ranks) for ranks in dp_lists))


def split_at(new_dp: int, global_batch_size: int, micro_batch_size: int, old_dp: int) -> UnevenSplit:
    """The step's micro-batches among `new_dp` ranks, the global batch size kept: even shares where new_dp
    divides them, else the uneven split (core/layout/uneven_split)."""
    try:
        return UnevenSplit(global_batch_size, micro_batch_size, new_dp)
    except ValueError as why:
        raise ScaleInRefused(f"cannot scale in from dp{old_dp} to dp{new_dp} with the global batch size "
                             f"{global_batch_size}: {why}") from None


def check_every_shard_survives(layout: ReplicaLayout, survivors: Sequence[int]) -> None:
    """Every optimizer shard needs a surviving holder: the dump the survivors reload is saved from them."""
    alive = set(survivors)
    for replica_set in layout.sets:
        for shard in range(replica_set.num_shards):
            holders = replica_set.holders(shard)
            if not alive & set(holders):
                raise ScaleInRefused(
                    f"optimizer shard {shard} of data-parallel list {list(replica_set.rank_list)} (type "
                    f"{replica_set.optimizer_type}) has no surviving holder (held by {list(holders)}): its state "
                    f"is lost, the job cannot go on")


def replicas_at(new_dp: int, replica_cnt: int, expert_parallel: int = 1) -> int:
    """The most optimizer replicas, up to the job's R, that divide the new data-parallel size (and the new
    expert data-parallel size, dp / EP, where EP divides dp: Megatron cuts both into the instances)."""
    sizes = [new_dp] + ([new_dp // expert_parallel] if new_dp % expert_parallel == 0 else [])
    return max(r for r in range(1, min(replica_cnt, new_dp) + 1) if all(size % r == 0 for size in sizes))


def refuse_expert_misfit(expert_parallel: int, plan: ScaleInPlan) -> None:
    """The experts stay where they are (each survivor keeps its expert-parallel rank), so the new data-parallel
    size must be a multiple of the expert-parallel size, and every survivor must run the same micro-batches
    (an expert's all-to-all meets every rank of its group at each micro-batch)."""
    if expert_parallel == 1:
        return
    if plan.uneven or plan.new_dp % expert_parallel:
        raise ScaleInRefused(f"scale-in to dp{plan.new_dp} with expert-parallel size {expert_parallel}: the new "
                             f"data-parallel size must be a multiple of it"
                             + (", with the step's micro-batches shared evenly" if plan.uneven else ""))
