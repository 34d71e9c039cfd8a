"""Elastic training's scale-in, as plain data: which ranks go on after ranks were lost and not replaced,
and at which sizes (docs/elastic.md).

Every TP x PP rank of a data-parallel index that lost a rank leaves with it: a model replica missing a
piece is no replica. The survivors are renumbered densely (the new rank of each is its index among the
survivors, which keeps Megatron's rank order). The global batch size stays what it was: each survivor
takes more micro-batches, so the samples of a step, and the losses, are those of the full job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple

from mindio_adaptor.core.replica_layout import ReplicaLayout


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
    num_microbatches: int  # per survivor and step, at the new data-parallel size

    def new_rank(self, old_rank: int) -> int:
        if old_rank not in self.survivors:
            raise ScaleInRefused(f"rank {old_rank} does not survive the scale-in (survivors "
                                 f"{list(self.survivors)})")
        return self.survivors.index(old_rank)

    def describe(self) -> str:
        return (f"dp{self.old_dp} -> dp{self.new_dp} (data-parallel indices {list(self.lost_dp_indices)} lost "
                f"a rank; survivors {list(self.survivors)}, {self.num_microbatches} micro-batches each)")


def plan_scale_in(dp_lists: Sequence[Sequence[int]], lost: Iterable[int], global_batch_size: int,
                  micro_batch_size: int, layout: Optional[ReplicaLayout] = None) -> ScaleInPlan:
    """The scale-in after `lost` ranks are gone, from Megatron's data-parallel rank lists (one per TP x
    PP position, each in data-parallel order); raises ScaleInRefused when the job cannot go on."""
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
    num_microbatches = microbatches_at(new_dp, global_batch_size, micro_batch_size, old_dp)
    if layout is not None:
        check_every_shard_survives(layout, survivors)
        check_replicas_divide(layout, new_dp, old_dp)
    return ScaleInPlan(tuple(sorted(lost)), survivors, tuple(sorted(leaving - lost)), tuple(lost_indices), old_dp, new_dp,
                       num_microbatches)


def microbatches_at(new_dp: int, global_batch_size: int, micro_batch_size: int, old_dp: int) -> int:
    """Micro-batches per rank and step that keep the global batch size at `new_dp` ranks."""
    per_step = micro_batch_size * new_dp
    if global_batch_size % per_step:
        raise ScaleInRefused(
            f"cannot scale in from dp{old_dp} to dp{new_dp}: the global batch size {global_batch_size} is not a "
            f"multiple of micro-batch size {micro_batch_size} x dp{new_dp} = {per_step}, so the survivors cannot "
            f"keep it")
    return global_batch_size // per_step


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


def check_replicas_divide(layout: ReplicaLayout, new_dp: int, old_dp: int) -> None:
    """The replicated optimizer keeps its replica count R, which must divide the new size."""
    replica_cnt = layout.sets[0].replica_cnt
    if new_dp % replica_cnt:
        raise ScaleInRefused(f"cannot scale in from dp{old_dp} to dp{new_dp}: the optimizer's {replica_cnt} "
                             f"replicas (--optimizer-replica-num) must divide the data-parallel size")
