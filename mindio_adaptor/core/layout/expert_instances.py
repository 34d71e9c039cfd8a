"""Optimizer instances for a job with separate expert data-parallel lists (MoE with expert parallelism).

Without experts each data-parallel list can be cut into replica groups on its own (`replica_layout`).
With experts it cannot: Megatron builds an optimizer instance from whole expert model-parallel slices
(the ranks at one position of every expert data-parallel list: one copy of every expert), and the dense
and the expert optimizers share the one inter-instance group. So the choice is made once, for the job:
which slices form each of the R instances. Every dense and every expert list is then cut by it (its
ranks in instance k, ascending, are its replica group k), and a shard's holders are those at one
position of every group. Megatron's own choice (consecutive slices) comes first and is kept unless
another crowds fewer shards onto one node.
"""
from __future__ import annotations

from itertools import combinations
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

PARTITION_BUDGET = 20_000  # partitions scored before the best so far is taken (16 slices, R=2: 6,435)

Instances = List[Tuple[int, ...]]  # R instances, each its ranks ascending


def expert_slices(expert_lists: Sequence[Sequence[int]]) -> Optional[List[Tuple[int, ...]]]:
    """Slice i: the i-th rank of every expert list. None when the lists are not of one length."""
    lengths = {len(ranks) for ranks in expert_lists}
    if len(lengths) != 1:
        return None
    return [tuple(sorted(column)) for column in zip(*(sorted(ranks) for ranks in expert_lists))]


def choose_instances(dense_lists: Sequence[Sequence[int]], expert_lists: Sequence[Sequence[int]],
                     replica_cnt: int, node_of: Mapping[int, object]) -> Optional[Tuple[Instances, int]]:
    """The instances whose holders crowd the fewest shards onto one node, and that count; None when
    the lists cannot be cut by whole slices (then each list is laid out on its own)."""
    slices = expert_slices(expert_lists)
    if slices is None or len(slices) % replica_cnt:
        return None
    best, best_crowded = None, None
    for instances in _candidates(slices, replica_cnt):
        dense_cut = [groups_under(instances, ranks) for ranks in dense_lists]
        expert_cut = [groups_under(instances, ranks) for ranks in expert_lists]
        if None in dense_cut or None in expert_cut or not _one_inter_group(dense_cut, expert_cut):
            continue
        crowded = _crowded_rows(dense_cut + expert_cut, node_of)
        if best is None or crowded < best_crowded:
            best, best_crowded = instances, crowded
        if best_crowded == 0:
            break
    return None if best is None else (best, best_crowded)


def groups_under(instances: Instances, ranks: Sequence[int]) -> Optional[List[Tuple[int, ...]]]:
    """A list's replica groups under `instances`, or None when they are not of one size."""
    members = set(ranks)
    groups = [tuple(r for r in instance if r in members) for instance in instances]
    if len({len(group) for group in groups}) != 1 or sum(map(len, groups)) != len(members):
        return None
    return groups


def crowded_under(instances: Instances, lists: Iterable[Sequence[int]], node_of: Mapping[int, object]) -> Optional[int]:
    """Shards, over all lists, with two holders on one node; None when a list cannot be cut evenly."""
    cut = [groups_under(instances, ranks) for ranks in lists]
    return None if None in cut else _crowded_rows(cut, node_of)


def _crowded_rows(cut: List[List[Tuple[int, ...]]], node_of: Mapping[int, object]) -> int:
    """Over every list's replica groups, the rows of holders (one shard each) with two on one node."""
    return sum(len({node_of.get(r, ("unplaced", r)) for r in row}) < len(row)
               for groups in cut for row in zip(*groups))


def _one_inter_group(dense_cut: List[List[Tuple[int, ...]]], expert_cut: List[List[Tuple[int, ...]]]) -> bool:
    """Megatron all-reduces a dense shard across instances over the expert inter-instance group, so
    every rank's dense holders must be its expert holders."""
    rows = {r: row for groups in dense_cut for row in zip(*groups) for r in row}
    return all(rows.get(r) == row for groups in expert_cut for row in zip(*groups) for r in row)


def _candidates(slices: List[Tuple[int, ...]], r_count: int) -> Iterator[Instances]:
    per = len(slices) // r_count
    yield [_merge(slices[k * per:(k + 1) * per]) for k in range(r_count)]  # Megatron's consecutive slices
    yield [_merge(slices[k::r_count]) for k in range(r_count)]  # strided: cyclic placements
    for n, parts in enumerate(_partitions(list(range(len(slices))), per)):
        if n >= PARTITION_BUDGET:
            return
        yield [_merge([slices[i] for i in part]) for part in parts]


def _partitions(indices: List[int], per: int) -> Iterator[List[Tuple[int, ...]]]:
    """Every partition of `indices` into groups of `per`, each once (the first index leads a group)."""
    if not indices:
        yield []
        return
    first, rest = indices[0], indices[1:]
    for others in combinations(rest, per - 1):
        remaining = [i for i in rest if i not in others]
        for tail in _partitions(remaining, per):
            yield [(first, *others), *tail]


def _merge(slices: Iterable[Tuple[int, ...]]) -> Tuple[int, ...]:
    return tuple(sorted(r for s in slices for r in s))
