"""Who holds which optimizer shard: the one source of truth for replicas.

A data-parallel rank list L of length d is cut, for R replicas, into R replica groups of g = d / R
ranks. Inside a replica group the distributed optimizer shards its state g ways, so shard j is held by
the j-th rank of every replica group. The controller, the dump and the repair all read the answer
from the same `ReplicaLayout`.

The reference cuts L in Megatron's order (group k = L[k*g:(k+1)*g]). We first re-order L so that
the R holders of a shard sit on different nodes wherever the node counts allow it; with the usual
block placement (each node a contiguous range of ranks) that re-ordering is the identity, so the
layout equals the reference's.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from mindio_adaptor.core.layout import expert_instances

logger = logging.getLogger(__name__)

ATTENTION = 0  # dense optimizer (the reference's OptimizerType.ATTENTION)
MOE = 1  # expert optimizer
_UNPLACED = object()  # node key prefix for ranks missing from node_of


class LayoutError(ValueError):
    """A rank list or replica count that cannot form a replica layout."""


@dataclass(frozen=True)
class ShardKey:
    """One optimizer shard: its optimizer type, which DP rank list it belongs to, and its index."""

    optimizer_type: int
    group_index: int
    shard: int


def order_for_anti_affinity(ranks: Sequence[int], num_shards: int,
                            node_of: Optional[Mapping[int, object]]) -> Tuple[List[int], bool]:
    """Choose R = len(ranks) / num_shards replica groups so that the holders of each shard sit on
    different nodes. Returns (order, spread): `order` is the groups concatenated, group k being
    order[k*g:(k+1)*g], and spread tells whether every shard's holders are on distinct nodes.

    A process group numbers its members by ascending global rank, so a rank's shard is its position
    in its sorted group: every candidate keeps each group sorted. Megatron's own contiguous cut comes
    first and is kept unless another candidate crowds fewer shards, so with the usual block
    placement (nodes are contiguous rank ranges) the layout is the reference's."""
    ranks = list(ranks)
    if node_of is None:
        return ranks, True
    node = {r: node_of[r] if r in node_of else (_UNPLACED, r) for r in ranks}
    best, best_crowded = None, None
    for groups in _candidate_groups(ranks, num_shards, node):
        crowded = _crowded_count(groups, node)
        if best is None or crowded < best_crowded:
            best, best_crowded = groups, crowded
        if crowded == 0:
            break
    return [r for group in best for r in group], best_crowded == 0


def _candidate_groups(ranks: List[int], g: int, node) -> Iterable[List[List[int]]]:
    r_count = len(ranks) // g
    yield [ranks[k * g:(k + 1) * g] for k in range(r_count)]  # Megatron's contiguous cut
    yield [sorted(ranks[k::r_count]) for k in range(r_count)]  # strided: cyclic placements
    yield _greedy_groups(sorted(ranks), g, r_count, node)
    searched = _searched_groups(sorted(ranks), g, r_count, node)
    if searched is not None:
        yield searched


def _greedy_groups(ascending: List[int], g: int, r_count: int, node) -> List[List[int]]:
    """Deal ranks in ascending order; a rank joins the least filled group whose next shard row has
    no rank of its node yet (the least filled group if every one has). Rows stay sorted."""
    groups: List[List[int]] = [[] for _ in range(r_count)]
    rows: List[set] = [set() for _ in range(g)]
    for rank in ascending:
        open_groups = [k for k in range(r_count) if len(groups[k]) < g]
        fitting = [k for k in open_groups if node[rank] not in rows[len(groups[k])]]
        k = min(fitting or open_groups, key=lambda k: (len(groups[k]), k))
        rows[len(groups[k])].add(node[rank])
        groups[k].append(rank)
    return groups


SEARCH_MAX_RANKS = 512


def _searched_groups(ascending: List[int], g: int, r_count: int, node,
                     budget: int = 200_000) -> Optional[List[List[int]]]:
    """Depth-first search for groups with every shard row on distinct nodes, or None when none is
    found within `budget` steps. Dealing ranks in ascending order keeps every group sorted; groups
    equally filled are interchangeable, so only one of each fill level is tried. Recursive, one
    level per rank: lists longer than SEARCH_MAX_RANKS keep the best of the cheap candidates."""
    if len(ascending) > SEARCH_MAX_RANKS:
        return None
    groups: List[List[int]] = [[] for _ in range(r_count)]
    rows: List[set] = [set() for _ in range(g)]
    steps = [0]

    def place(i: int) -> bool:
        if i == len(ascending):
            return True
        steps[0] += 1
        if steps[0] > budget:
            return False
        rank, tried = ascending[i], set()
        for k in sorted(range(r_count), key=lambda k: len(groups[k])):
            row = len(groups[k])
            if row == g or row in tried or node[rank] in rows[row]:
                continue
            tried.add(row)
            groups[k].append(rank)
            rows[row].add(node[rank])
            if place(i + 1):
                return True
            groups[k].pop()
            rows[row].discard(node[rank])
        return False

    return groups if place(0) else None


def _given_order(ranks: List[int], groups: Sequence[Sequence[int]], replica_cnt: int,
                 node_of: Optional[Mapping[int, object]]) -> Tuple[List[int], bool]:
    g = len(ranks) // replica_cnt
    if len(groups) != replica_cnt or any(len(group) != g or list(group) != sorted(group) for group in groups):
        raise LayoutError(f"replica groups {[list(group) for group in groups]} are not {replica_cnt} ascending "
                          f"groups of {g} ranks")
    order = [r for group in groups for r in group]
    if sorted(order) != sorted(ranks):
        raise LayoutError(f"replica groups {[list(group) for group in groups]} do not hold the rank list {ranks}")
    if node_of is None:
        return order, True
    node = {r: node_of[r] if r in node_of else (_UNPLACED, r) for r in ranks}
    return order, _crowded_count([list(group) for group in groups], node) == 0


def _crowded_count(groups: List[List[int]], node) -> int:
    g = len(groups[0])
    return sum(len({node[group[j]] for group in groups}) < len(groups) for j in range(g))


class ReplicaSet:
    """The replica layout of one data-parallel rank list."""

    def __init__(self, rank_list: Sequence[int], replica_cnt: int, optimizer_type: int = ATTENTION,
                 group_index: int = 0, node_of: Optional[Mapping[int, object]] = None,
                 groups: Optional[Sequence[Sequence[int]]] = None):
        """`groups`: replica groups chosen for the whole job (core/layout/expert_instances); by default
        the groups are chosen for this list alone."""
        ranks = list(rank_list)
        _check(ranks, replica_cnt)
        self.rank_list = tuple(ranks)
        self.replica_cnt = replica_cnt
        self.optimizer_type = optimizer_type
        self.group_index = group_index
        self.num_shards = len(ranks) // replica_cnt
        if groups is None:
            order, self.spread_across_nodes = order_for_anti_affinity(ranks, self.num_shards, node_of)
        else:
            order, self.spread_across_nodes = _given_order(ranks, groups, replica_cnt, node_of)
        self.ordered_ranks = tuple(order)
        self._index = {rank: i for i, rank in enumerate(order)}

    @property
    def replica_groups(self) -> List[Tuple[int, ...]]:
        g = self.num_shards
        return [self.ordered_ranks[k * g:(k + 1) * g] for k in range(self.replica_cnt)]

    def holders(self, shard: int) -> Tuple[int, ...]:
        if not 0 <= shard < self.num_shards:
            raise LayoutError(f"shard {shard} out of range 0..{self.num_shards - 1}")
        return self.ordered_ranks[shard::self.num_shards]

    def shard_of(self, rank: int) -> int:
        return self._position(rank) % self.num_shards

    def replica_of(self, rank: int) -> int:
        return self._position(rank) // self.num_shards

    def peers(self, rank: int) -> Tuple[int, ...]:
        return tuple(r for r in self.holders(self.shard_of(rank)) if r != rank)

    def key(self, shard: int) -> ShardKey:
        return ShardKey(self.optimizer_type, self.group_index, shard)

    def savers(self, unavailable: Iterable[int]) -> Tuple[Dict[int, int], List[int]]:
        """For each shard the first holder (in replica order) not in `unavailable`.
        Returns ({shard: saver rank}, [shards with no available holder])."""
        bad = set(unavailable)
        chosen, missing = {}, []
        for shard in range(self.num_shards):
            alive = [r for r in self.holders(shard) if r not in bad]
            if alive:
                chosen[shard] = alive[0]
            else:
                missing.append(shard)
        return chosen, missing

    def repair_pairs(self, bad_ranks: Iterable[int]) -> Tuple[List[Tuple[int, int]], List[int]]:
        """For each bad rank at position i, the first healthy rank at (i + k*g) mod d.
        Returns ([(src, dst)], [bad ranks of this set with no healthy peer])."""
        bad = set(bad_ranks)
        d, g = len(self.ordered_ranks), self.num_shards
        pairs, orphans = [], []
        for dst in self.ordered_ranks:
            if dst not in bad:
                continue
            i = self._index[dst]
            src = next((self.ordered_ranks[(i + k * g) % d] for k in range(1, self.replica_cnt)
                        if self.ordered_ranks[(i + k * g) % d] not in bad), None)
            if src is None:
                orphans.append(dst)
            else:
                pairs.append((src, dst))
        return pairs, orphans

    def _position(self, rank: int) -> int:
        try:
            return self._index[rank]
        except KeyError:
            raise LayoutError(f"rank {rank} is not in rank list {list(self.rank_list)}") from None

    def __repr__(self):
        return (f"ReplicaSet(type={self.optimizer_type}, groups={self.replica_groups}, "
                f"R={self.replica_cnt})")


class ReplicaLayout:
    """All replica sets of a job (one per DP rank list and optimizer type)."""

    def __init__(self, sets: Sequence[ReplicaSet]):
        self.sets = list(sets)
        # The job's optimizer instances when they were chosen for all lists at once (MoE), else None.
        self.instances: Optional[List[Tuple[int, ...]]] = None
        seen = {}
        for s in self.sets:
            for rank in s.rank_list:
                if (s.optimizer_type, rank) in seen:
                    raise LayoutError(f"rank {rank} appears in two rank lists of optimizer type "
                                      f"{s.optimizer_type}")
                seen[(s.optimizer_type, rank)] = s

    @classmethod
    def from_dp_lists(cls, dp_lists: Sequence[Sequence[int]], replica_cnt: int,
                      node_of: Optional[Mapping[int, object]] = None,
                      expert_dp_lists: Sequence[Sequence[int]] = (), warn: bool = True) -> "ReplicaLayout":
        chosen = None
        if expert_dp_lists and node_of is not None:
            chosen = expert_instances.choose_instances(dp_lists, expert_dp_lists, replica_cnt, node_of)
        instances = chosen[0] if chosen else None

        def replica_set(ranks, optimizer_type, index):
            groups = None if instances is None else expert_instances.groups_under(instances, ranks)
            return ReplicaSet(ranks, replica_cnt, optimizer_type, index, node_of, groups)

        sets = [replica_set(ranks, ATTENTION, i) for i, ranks in enumerate(dp_lists)]
        sets += [replica_set(ranks, MOE, i) for i, ranks in enumerate(expert_dp_lists)]
        layout = cls(sets)
        layout.instances = instances
        if warn:
            layout.warn_if_not_spread()
        return layout

    def sets_of(self, optimizer_type: int) -> List[ReplicaSet]:
        """The data-parallel lists of one optimizer type (ATTENTION: the dense ones), in the layout's order."""
        return [s for s in self.sets if s.optimizer_type == optimizer_type]

    def set_of(self, rank: int, optimizer_type: int = ATTENTION) -> ReplicaSet:
        for s in self.sets:
            if s.optimizer_type == optimizer_type and rank in s._index:
                return s
        raise LayoutError(f"rank {rank} has no replica set of optimizer type {optimizer_type}")

    def holders(self, key: ShardKey) -> Tuple[int, ...]:
        return self._set(key.optimizer_type, key.group_index).holders(key.shard)

    def shard_holders(self) -> Iterator[Tuple[int, Tuple[int, ...]]]:
        """(optimizer type, holders) of every shard of every set."""
        for s in self.sets:
            for shard in range(s.num_shards):
                yield s.optimizer_type, s.holders(shard)

    def savers(self, unavailable: Iterable[int]) -> Tuple[Dict[ShardKey, int], List[ShardKey]]:
        """One saver per shard of every set, and the shards nobody available holds."""
        unavailable = set(unavailable)
        chosen, missing = {}, []
        for s in self.sets:
            found, lost = s.savers(unavailable)
            chosen.update({s.key(shard): rank for shard, rank in found.items()})
            missing += [s.key(shard) for shard in lost]
        return chosen, missing

    def save_info(self, unavailable: Iterable[int]) -> List[dict]:
        """The reference's `save_info` argument: [{"type": t, "ranks": [savers...]}] per type."""
        chosen, _ = self.savers(unavailable)
        by_type: Dict[int, set] = {}
        for key, rank in chosen.items():
            by_type.setdefault(key.optimizer_type, set()).add(rank)
        return [{"type": t, "ranks": sorted(r)} for t, r in sorted(by_type.items())]

    def repair_pairs(self, bad_ranks: Iterable[int]) -> Dict[int, Tuple[List[Tuple[int, int]], List[int]]]:
        """Per optimizer type: ([(src, dst)], [bad ranks without a healthy peer])."""
        bad = set(bad_ranks)
        result: Dict[int, Tuple[List[Tuple[int, int]], List[int]]] = {}
        for s in self.sets:
            pairs, orphans = s.repair_pairs(bad)
            acc = result.setdefault(s.optimizer_type, ([], []))
            acc[0].extend(pairs)
            acc[1].extend(orphans)
        return result

    def to_reference(self) -> List[dict]:
        """The argument of the reference's `tft_set_optimizer_replica`, one dict per set."""
        return [{"rank_list": list(s.ordered_ranks), "replica_cnt": s.replica_cnt, "replica_shift": 0,
                 "optimizer_type": s.optimizer_type} for s in self.sets]

    def warn_if_not_spread(self):
        crowded = [s for s in self.sets if not s.spread_across_nodes]
        if crowded and not getattr(ReplicaLayout, "_warned", False):
            ReplicaLayout._warned = True
            logger.warning("replica holders share a node in %d rank list(s) (first: %s): a node loss "
                           "there loses every copy of some shard", len(crowded), crowded[0])

    def _set(self, optimizer_type: int, group_index: int) -> ReplicaSet:
        for s in self.sets:
            if s.optimizer_type == optimizer_type and s.group_index == group_index:
                return s
        raise LayoutError(f"no replica set of type {optimizer_type} with index {group_index}")


def _check(ranks: List[int], replica_cnt: int):
    if not isinstance(replica_cnt, int) or replica_cnt < 1:
        raise LayoutError(f"replica count must be an integer >= 1, got {replica_cnt!r}")
    if not ranks:
        raise LayoutError("rank list is empty")
    if any(not isinstance(r, int) or r < 0 for r in ranks):
        raise LayoutError(f"rank list holds a value that is not a rank (int >= 0): {ranks}")
    if len(set(ranks)) != len(ranks):
        raise LayoutError(f"rank list has duplicates: {ranks}")
    if replica_cnt > 1 and len(ranks) == 1:
        raise LayoutError(f"{replica_cnt} replicas need a data-parallel size > 1; got rank list {ranks}")
    if len(ranks) % replica_cnt:
        raise LayoutError(f"data-parallel size {len(ranks)} is not divisible by replica count "
                          f"{replica_cnt} (rank list {ranks})")


def crowded_shards(replica_set: ReplicaSet, node_of: Mapping[int, object]) -> List[Tuple[int, Tuple[int, ...]]]:
    """Shards of `replica_set` with two or more holders on one node: [(shard, holders)]."""
    crowded = []
    for shard in range(replica_set.num_shards):
        holders = replica_set.holders(shard)
        if len({node_of.get(h, h) for h in holders}) < len(holders):
            crowded.append((shard, holders))
    return crowded
