"""Table-driven unit tests for mindio_adaptor.core.layout.replica_layout.

The layout math follows the reference (shared notes, reference-system.md §2 and §6): a DP rank list L of
length d with R replicas is cut into R replica groups of g = d / R ranks; shard j is held by
L[j], L[j+g], ...; savers are the first available holder of each shard in replica order; a bad rank at
position i is repaired from the first healthy rank at (i + k*g) mod d, k = 1..R-1.
"""
import logging
import random

import pytest

from mindio_adaptor.core.layout.replica_layout import (
    ATTENTION,
    MOE,
    LayoutError,
    ReplicaLayout,
    ReplicaSet,
    ShardKey,
    order_for_anti_affinity,
)

LOGGER_NAME = "mindio_adaptor.core.layout.replica_layout"


@pytest.fixture(autouse=True)
def _reset_warned(monkeypatch):
    # The "replicas share a node" warning is emitted once per process via a class flag.
    monkeypatch.setattr(ReplicaLayout, "_warned", False, raising=False)


# --------------------------------------------------------------------------------------------------
# Brute-force oracle, written straight from the reference's rules (not from the implementation).
# --------------------------------------------------------------------------------------------------

def oracle_holders(order, R):
    g = len(order) // R
    return {j: [order[j + k * g] for k in range(R)] for j in range(g)}


def oracle_savers(order, R, dead):
    chosen, missing = {}, []
    for j, holders in oracle_holders(order, R).items():
        alive = [r for r in holders if r not in dead]
        if alive:
            chosen[j] = alive[0]
        else:
            missing.append(j)
    return chosen, missing


def oracle_repair(order, R, bad):
    d = len(order)
    g = d // R
    pairs, orphans = [], []
    for i, dst in enumerate(order):
        if dst not in bad:
            continue
        src = None
        for k in range(1, R):
            cand = order[(i + k * g) % d]
            if cand not in bad:
                src = cand
                break
        if src is None:
            orphans.append(dst)
        else:
            pairs.append((src, dst))
    return pairs, orphans


# --------------------------------------------------------------------------------------------------
# The reference's own examples
# --------------------------------------------------------------------------------------------------

def test_reference_example_tp2_8_ranks():
    tp = 2
    dp_lists = [list(range(t, 8, tp)) for t in range(tp)]
    assert dp_lists == [[0, 2, 4, 6], [1, 3, 5, 7]]
    layout = ReplicaLayout.from_dp_lists(dp_lists, 2)
    groups = [grp for s in layout.sets for grp in s.replica_groups]
    assert groups == [(0, 2), (4, 6), (1, 3), (5, 7)]
    peers = {r: layout.set_of(r).peers(r) for r in range(8)}
    assert peers == {0: (4,), 4: (0,), 2: (6,), 6: (2,), 1: (5,), 5: (1,), 3: (7,), 7: (3,)}


def test_reference_savers_example_rank3_dead():
    s = ReplicaSet([0, 1, 2, 3], 2)
    assert s.savers({3}) == ({0: 0, 1: 1}, [])
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    chosen, missing = layout.savers([3])
    assert chosen == {ShardKey(ATTENTION, 0, 0): 0, ShardKey(ATTENTION, 0, 1): 1}
    assert missing == []
    assert layout.save_info([3]) == [{"type": ATTENTION, "ranks": [0, 1]}]


def test_reference_repair_example_ranks_0_and_3_bad():
    s = ReplicaSet([0, 1, 2, 3], 2)
    pairs, orphans = s.repair_pairs({0, 3})
    assert sorted(pairs) == [(1, 3), (2, 0)]
    assert orphans == []
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    res = layout.repair_pairs([0, 3])
    assert set(res) == {ATTENTION}
    assert sorted(res[ATTENTION][0]) == [(1, 3), (2, 0)]
    assert res[ATTENTION][1] == []


def test_to_reference_shape():
    layout = ReplicaLayout.from_dp_lists([[0, 2, 4, 6], [1, 3, 5, 7]], 2, expert_dp_lists=[[0, 1, 2, 3]])
    assert layout.to_reference() == [
        {"rank_list": [0, 2, 4, 6], "replica_cnt": 2, "replica_shift": 0, "optimizer_type": ATTENTION},
        {"rank_list": [1, 3, 5, 7], "replica_cnt": 2, "replica_shift": 0, "optimizer_type": ATTENTION},
        {"rank_list": [0, 1, 2, 3], "replica_cnt": 2, "replica_shift": 0, "optimizer_type": MOE},
    ]


@pytest.mark.parametrize("dead, expected", [
    (set(), [{"type": ATTENTION, "ranks": [0, 1, 2, 3]}]),
    ({4}, [{"type": ATTENTION, "ranks": [0, 1, 2, 3]}]),
    ({0}, [{"type": ATTENTION, "ranks": [1, 2, 3, 4]}]),
    ({0, 5}, [{"type": ATTENTION, "ranks": [1, 2, 3, 4]}]),
    ({0, 4}, [{"type": ATTENTION, "ranks": [1, 2, 3]}]),  # shard 0 lost: not in save_info
])
def test_save_info_shape(dead, expected):
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3, 4, 5, 6, 7]], 2)
    info = layout.save_info(dead)
    assert info == expected
    for entry in info:
        assert set(entry) == {"type", "ranks"}
        assert entry["ranks"] == sorted(entry["ranks"])


# --------------------------------------------------------------------------------------------------
# R = 1, R = d, R = 4 with d = 8
# --------------------------------------------------------------------------------------------------

LAYOUT_CASES = [
    # (rank_list, R, expected replica groups)
    ([0, 1, 2, 3], 1, [(0, 1, 2, 3)]),
    ([5, 3, 9], 1, [(5, 3, 9)]),
    ([0, 1, 2, 3], 4, [(0,), (1,), (2,), (3,)]),
    ([7, 2], 2, [(7,), (2,)]),
    (list(range(8)), 4, [(0, 1), (2, 3), (4, 5), (6, 7)]),
    (list(range(8)), 8, [(r,) for r in range(8)]),
    ([0, 2, 4, 6, 8, 10, 12, 14], 2, [(0, 2, 4, 6), (8, 10, 12, 14)]),
    ([3], 1, [(3,)]),
]


@pytest.mark.parametrize("ranks, R, groups", LAYOUT_CASES)
def test_replica_groups(ranks, R, groups):
    s = ReplicaSet(ranks, R)
    assert s.replica_groups == groups
    assert s.num_shards == len(ranks) // R
    assert s.ordered_ranks == tuple(ranks)  # no node_of: identity, like the reference


@pytest.mark.parametrize("ranks, R, groups", LAYOUT_CASES)
def test_shard_replica_peers_holders_consistent(ranks, R, groups):
    s = ReplicaSet(ranks, R)
    g = len(ranks) // R
    for k, group in enumerate(groups):
        for j, rank in enumerate(group):
            assert s.shard_of(rank) == j
            assert s.replica_of(rank) == k
            assert rank in s.holders(j)
            assert s.peers(rank) == tuple(grp[j] for grp in groups if grp[j] != rank)
    for j in range(g):
        assert s.holders(j) == tuple(grp[j] for grp in groups)
        assert len(s.holders(j)) == R


def test_r1_no_peers_no_repair():
    s = ReplicaSet([0, 1, 2, 3], 1)
    assert all(s.peers(r) == () for r in range(4))
    assert s.savers({2}) == ({0: 0, 1: 1, 3: 3}, [2])
    assert s.repair_pairs({1, 3}) == ([], [1, 3])


def test_r_equals_d_every_rank_holds_everything():
    s = ReplicaSet([10, 11, 12, 13], 4)
    assert s.num_shards == 1
    assert s.holders(0) == (10, 11, 12, 13)
    assert all(s.shard_of(r) == 0 for r in s.rank_list)
    assert [s.replica_of(r) for r in (10, 11, 12, 13)] == [0, 1, 2, 3]
    assert s.peers(12) == (10, 11, 13)
    assert s.savers({10, 11}) == ({0: 12}, [])
    assert s.savers({10, 11, 12, 13}) == ({}, [0])
    # bad 10 at i=0: walk positions 1, 2, 3 -> 11 is bad, 12 healthy.
    pairs, orphans = s.repair_pairs({10, 11})
    assert sorted(pairs) == [(12, 10), (12, 11)]
    assert orphans == []


def test_r4_d8():
    s = ReplicaSet(list(range(8)), 4)
    assert s.num_shards == 2
    assert s.holders(0) == (0, 2, 4, 6)
    assert s.holders(1) == (1, 3, 5, 7)
    assert s.peers(5) == (1, 3, 7)
    assert (s.shard_of(5), s.replica_of(5)) == (1, 2)
    assert s.savers({0, 2, 1}) == ({0: 4, 1: 3}, [])
    # 6 at i=6: (6+2)%8=0 bad, (6+4)%8=2 healthy.
    pairs, orphans = s.repair_pairs({6, 0})
    assert sorted(pairs) == [(2, 0), (2, 6)]
    assert orphans == []
    assert s.repair_pairs({0, 2, 4, 6}) == ([], [0, 2, 4, 6])


@pytest.mark.parametrize("shard", [-1, 2, 100])
def test_holders_shard_out_of_range(shard):
    s = ReplicaSet(list(range(8)), 4)
    with pytest.raises(LayoutError, match="out of range"):
        s.holders(shard)


@pytest.mark.parametrize("method", ["shard_of", "replica_of", "peers"])
def test_unknown_rank(method):
    s = ReplicaSet([0, 1, 2, 3], 2)
    with pytest.raises(LayoutError, match="rank 9 is not in rank list"):
        getattr(s, method)(9)


def test_layout_holders_by_key_and_unknown_set():
    layout = ReplicaLayout.from_dp_lists([[0, 2, 4, 6], [1, 3, 5, 7]], 2)
    assert layout.holders(ShardKey(ATTENTION, 1, 1)) == (3, 7)
    assert layout.holders(ShardKey(ATTENTION, 0, 0)) == (0, 4)
    with pytest.raises(LayoutError, match="no replica set of type 1"):
        layout.holders(ShardKey(MOE, 0, 0))
    with pytest.raises(LayoutError, match="out of range"):
        layout.holders(ShardKey(ATTENTION, 0, 2))
    with pytest.raises(LayoutError, match="rank 8 has no replica set"):
        layout.set_of(8)


# --------------------------------------------------------------------------------------------------
# MoE: expert-DP lists form a second optimizer type
# --------------------------------------------------------------------------------------------------

def _moe_layout():
    # 8 ranks, TP=2 -> dense DP lists [0,2,4,6], [1,3,5,7]; EP=2 -> expert DP lists [0,4], [2,6], ...
    return ReplicaLayout.from_dp_lists([[0, 2, 4, 6], [1, 3, 5, 7]], 2,
                                       expert_dp_lists=[[0, 1, 2, 3], [4, 5, 6, 7]])


def test_moe_sets_types_and_indices():
    layout = _moe_layout()
    assert [(s.optimizer_type, s.group_index) for s in layout.sets] == [
        (ATTENTION, 0), (ATTENTION, 1), (MOE, 0), (MOE, 1)]
    # a rank appears in both types, with its own position in each
    assert layout.set_of(2, ATTENTION).rank_list == (0, 2, 4, 6)
    assert layout.set_of(2, MOE).rank_list == (0, 1, 2, 3)
    assert layout.set_of(2, ATTENTION).peers(2) == (6,)
    assert layout.set_of(2, MOE).peers(2) == (0,)
    assert layout.set_of(5).peers(5) == (1,)
    assert layout.set_of(5, MOE).peers(5) == (7,)
    assert layout.holders(ShardKey(MOE, 1, 1)) == (5, 7)


def test_moe_savers_per_type():
    layout = _moe_layout()
    chosen, missing = layout.savers({0, 3})
    assert chosen == {
        ShardKey(ATTENTION, 0, 0): 4, ShardKey(ATTENTION, 0, 1): 2,
        ShardKey(ATTENTION, 1, 0): 1, ShardKey(ATTENTION, 1, 1): 7,
        ShardKey(MOE, 0, 0): 2, ShardKey(MOE, 0, 1): 1,
        ShardKey(MOE, 1, 0): 4, ShardKey(MOE, 1, 1): 5,
    }
    assert missing == []
    assert layout.save_info({0, 3}) == [
        {"type": ATTENTION, "ranks": [1, 2, 4, 7]},
        {"type": MOE, "ranks": [1, 2, 4, 5]},
    ]


def test_moe_missing_shard_only_in_one_type():
    layout = _moe_layout()
    # 0 and 2 hold MOE shard (0, 0, 0) together; in the dense layout they hold different shards.
    chosen, missing = layout.savers({0, 2})
    assert missing == [ShardKey(MOE, 0, 0)]
    assert chosen[ShardKey(ATTENTION, 0, 0)] == 4
    assert chosen[ShardKey(ATTENTION, 0, 1)] == 6


def test_moe_repair_pairs_per_type():
    layout = _moe_layout()
    res = layout.repair_pairs({0, 2})
    assert set(res) == {ATTENTION, MOE}
    assert sorted(res[ATTENTION][0]) == [(4, 0), (6, 2)]
    assert res[ATTENTION][1] == []
    assert res[MOE][0] == []
    assert sorted(res[MOE][1]) == [0, 2]


def test_moe_rank_in_two_lists_of_same_type_rejected_but_across_types_allowed():
    ReplicaLayout.from_dp_lists([[0, 1]], 2, expert_dp_lists=[[0, 1]])
    with pytest.raises(LayoutError, match="rank 1 appears in two rank lists of optimizer type 1"):
        ReplicaLayout.from_dp_lists([[0, 1]], 2, expert_dp_lists=[[0, 1], [1, 2]])


# --------------------------------------------------------------------------------------------------
# Node anti-affinity
# --------------------------------------------------------------------------------------------------

def test_block_placement_is_identity():
    node_of = {r: r // 4 for r in range(16)}
    dp_lists = [list(range(8)), list(range(8, 16))]
    layout = ReplicaLayout.from_dp_lists(dp_lists, 2, node_of=node_of)
    for s, ranks in zip(layout.sets, dp_lists):
        assert s.ordered_ranks == tuple(ranks)
        assert s.spread_across_nodes
        for j in range(s.num_shards):
            assert len({node_of[r] for r in s.holders(j)}) == 2
    assert layout.to_reference() == ReplicaLayout.from_dp_lists(dp_lists, 2).to_reference()


def test_block_placement_tp2_is_identity():
    node_of = {r: r // 4 for r in range(8)}
    layout = ReplicaLayout.from_dp_lists([[0, 2, 4, 6], [1, 3, 5, 7]], 2, node_of=node_of)
    assert [s.ordered_ranks for s in layout.sets] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert all(s.spread_across_nodes for s in layout.sets)


def test_cyclic_placement_spreads_holders():
    node_of = {r: r % 2 for r in range(4)}
    # reference order would put 0 and 2 (both node 0) on shard 0
    assert {node_of[r] for r in ReplicaSet([0, 1, 2, 3], 2).holders(0)} == {0}
    s = ReplicaSet([0, 1, 2, 3], 2, node_of=node_of)
    assert sorted(s.ordered_ranks) == [0, 1, 2, 3]
    assert s.spread_across_nodes
    for j in range(s.num_shards):
        nodes = [node_of[r] for r in s.holders(j)]
        assert len(set(nodes)) == len(nodes) == 2
    # repair and savers follow the re-ordered layout
    for r in range(4):
        assert node_of[s.peers(r)[0]] != node_of[r]


def test_crowded_node_warns_once(caplog):
    node_of = {r: 0 for r in range(8)}  # one node holds everything: 4 ranks > 2 shards
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3], [4, 5, 6, 7]], 2, node_of=node_of)
    assert not any(s.spread_across_nodes for s in layout.sets)
    assert [s.ordered_ranks for s in layout.sets] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, node_of=node_of)  # second crowded layout: no new warning
    warnings = [r for r in caplog.records if r.name == LOGGER_NAME and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "share a node" in warnings[0].getMessage()
    assert "2 rank list(s)" in warnings[0].getMessage()


def test_spread_layout_does_not_warn(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, node_of={r: r % 2 for r in range(4)})
    ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2)
    assert not [r for r in caplog.records if r.name == LOGGER_NAME]


@pytest.mark.parametrize("node_of, spread", [
    ({0: "a", 1: "a", 2: "a", 3: "b"}, False),  # 3 ranks on "a" > 2 shards
    ({0: "a", 1: "a", 2: "b", 3: "b"}, True),
    ({0: "a", 1: "b", 2: "c", 3: "d"}, True),
])
def test_spread_flag(node_of, spread):
    order, ok = order_for_anti_affinity([0, 1, 2, 3], 2, node_of)
    assert ok is spread
    assert sorted(order) == [0, 1, 2, 3]


def test_rank_missing_from_node_of_is_its_own_node():
    # rank 1 has no node; it must not be merged with the node whose id happens to be 1.
    node_of = {0: 0, 2: 1, 3: 1}
    order, spread = order_for_anti_affinity([0, 1, 2, 3], 2, node_of)
    assert spread
    assert sorted(order) == [0, 1, 2, 3]
    g = 2
    for j in range(g):
        holders = order[j::g]
        nodes = [node_of.get(r, ("own", r)) for r in holders]
        assert len(set(nodes)) == len(nodes)


def test_anti_affinity_property_randomised():
    rng = random.Random(1234)
    checked_spread = 0
    for _ in range(400):
        R = rng.choice([1, 2, 2, 3, 4])
        g = rng.randint(1, 5)
        d = R * g
        if d == 1:
            continue
        ranks = rng.sample(range(4 * d), d)
        n_nodes = rng.randint(1, d)
        node_of = {r: rng.randrange(n_nodes) for r in ranks}
        s = ReplicaSet(ranks, R, node_of=node_of)
        assert sorted(s.ordered_ranks) == sorted(ranks)
        assert len(s.ordered_ranks) == d
        counts = {}
        for r in ranks:
            counts[node_of[r]] = counts.get(node_of[r], 0) + 1
        feasible = max(counts.values()) <= g
        assert s.spread_across_nodes == feasible
        if feasible:
            checked_spread += 1
            for j in range(g):
                nodes = [node_of[r] for r in s.holders(j)]
                assert len(set(nodes)) == R, (ranks, R, node_of, s.ordered_ranks)
        # the layout is internally consistent with its own order
        for r in ranks:
            assert s.ordered_ranks[s.replica_of(r) * g + s.shard_of(r)] == r
    assert checked_spread > 50


# --------------------------------------------------------------------------------------------------
# Savers and repair pairs against the brute-force oracle
# --------------------------------------------------------------------------------------------------

def _random_lists(rng, n_lists, R, g, universe):
    pool = rng.sample(universe, n_lists * R * g)
    return [pool[i * R * g:(i + 1) * R * g] for i in range(n_lists)]


def test_savers_and_repair_against_oracle_randomised():
    rng = random.Random(20240607)
    for case in range(300):
        R = rng.choice([1, 2, 3, 4])
        g = rng.randint(1, 4)
        if R * g == 1:
            g = 2
        n_dense = rng.randint(1, 3)
        n_expert = rng.randint(0, 2)
        universe = list(range(n_dense * R * g * 2))
        dense = _random_lists(rng, n_dense, R, g, universe)
        expert = _random_lists(rng, n_expert, R, g, universe)
        node_of = None
        if case % 2:
            node_of = {r: rng.randrange(4) for r in universe}
        layout = ReplicaLayout.from_dp_lists(dense, R, node_of=node_of, expert_dp_lists=expert)
        dead = set(rng.sample(universe, rng.randint(0, len(universe))))

        exp_chosen, exp_missing, exp_repair = {}, [], {}
        for s, ranks in zip(layout.sets, dense + expert):
            order = list(s.ordered_ranks)
            assert sorted(order) == sorted(ranks)
            if node_of is None:
                assert order == ranks
            chosen, missing = oracle_savers(order, R, dead)
            assert s.savers(dead) == (chosen, missing)
            exp_chosen.update({ShardKey(s.optimizer_type, s.group_index, j): r for j, r in chosen.items()})
            exp_missing += [ShardKey(s.optimizer_type, s.group_index, j) for j in missing]
            pairs, orphans = oracle_repair(order, R, dead)
            got_pairs, got_orphans = s.repair_pairs(dead)
            assert sorted(got_pairs) == sorted(pairs)
            assert sorted(got_orphans) == sorted(orphans)
            acc = exp_repair.setdefault(s.optimizer_type, ([], []))
            acc[0].extend(pairs)
            acc[1].extend(orphans)
            # every bad rank of the set is either repaired or an orphan, exactly once
            bad_here = sorted(r for r in order if r in dead)
            assert sorted([dst for _, dst in got_pairs] + got_orphans) == bad_here
            for src, dst in got_pairs:
                assert src not in dead and src in s.peers(dst)

        chosen, missing = layout.savers(dead)
        assert chosen == exp_chosen
        assert sorted(missing, key=lambda k: (k.optimizer_type, k.group_index, k.shard)) == \
            sorted(exp_missing, key=lambda k: (k.optimizer_type, k.group_index, k.shard))
        got = layout.repair_pairs(dead)
        assert set(got) == set(exp_repair)
        for t, (pairs, orphans) in exp_repair.items():
            assert sorted(got[t][0]) == sorted(pairs)
            assert sorted(got[t][1]) == sorted(orphans)
        info = layout.save_info(dead)
        exp_info = {}
        for key, r in exp_chosen.items():
            exp_info.setdefault(key.optimizer_type, set()).add(r)
        assert info == [{"type": t, "ranks": sorted(v)} for t, v in sorted(exp_info.items())]


@pytest.mark.parametrize("ranks, R, dead, savers, missing", [
    ([0, 1, 2, 3], 2, set(), {0: 0, 1: 1}, []),
    ([0, 1, 2, 3], 2, {0, 2}, {1: 1}, [0]),
    ([0, 1, 2, 3, 4, 5], 3, {0, 2}, {0: 4, 1: 1}, []),
    ([0, 1, 2, 3, 4, 5], 3, {0, 2, 4}, {1: 1}, [0]),
    ([4, 0, 6, 2], 2, {4}, {0: 6, 1: 0}, []),
    ([0, 1, 2, 3], 2, {99}, {0: 0, 1: 1}, []),  # unknown dead rank: ignored
])
def test_savers_table(ranks, R, dead, savers, missing):
    assert ReplicaSet(ranks, R).savers(dead) == (savers, missing)


@pytest.mark.parametrize("ranks, R, bad, pairs, orphans", [
    ([0, 1, 2, 3], 2, {0, 3}, [(2, 0), (1, 3)], []),
    ([0, 1, 2, 3], 2, {0, 2}, [], [0, 2]),
    ([0, 1, 2, 3, 4, 5], 3, {0, 2}, [(4, 0), (4, 2)], []),
    ([0, 1, 2, 3, 4, 5], 3, {4}, [(0, 4)], []),  # wraps around: (4 + 2) % 6 = 0
    ([0, 1, 2, 3, 4, 5], 3, {1, 3, 5}, [], [1, 3, 5]),
    ([0, 1, 2, 3], 2, set(), [], []),
    ([0, 1, 2, 3], 2, {42}, [], []),
])
def test_repair_table(ranks, R, bad, pairs, orphans):
    got_pairs, got_orphans = ReplicaSet(ranks, R).repair_pairs(bad)
    assert got_pairs == pairs
    assert got_orphans == orphans


def test_unavailable_may_be_a_generator():
    layout = ReplicaLayout.from_dp_lists([[0, 1, 2, 3]], 2, expert_dp_lists=[[0, 1, 2, 3]])
    chosen, _ = layout.savers(r for r in [0])
    assert chosen[ShardKey(ATTENTION, 0, 0)] == 2 and chosen[ShardKey(MOE, 0, 0)] == 2
    res = layout.repair_pairs(r for r in [0])
    assert res[ATTENTION][0] == [(2, 0)] and res[MOE][0] == [(2, 0)]


# --------------------------------------------------------------------------------------------------
# Invalid inputs
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ranks, R, message", [
    ([0, 1], 0, "replica count must be an integer >= 1"),
    ([0, 1], -2, "replica count must be an integer >= 1"),
    ([0, 1], 2.0, "replica count must be an integer >= 1"),
    ([0, 1], "2", "replica count must be an integer >= 1"),
    ([0, 1], None, "replica count must be an integer >= 1"),
    ([], 1, "rank list is empty"),
    ([0, 1, 1, 2], 2, "duplicates"),
    ([0, -1], 2, "not a rank"),
    ([0, 1.5], 2, "not a rank"),
    ([0, "1"], 2, "not a rank"),
    ([0, 1, 2], 2, "not divisible by replica count 2"),
    ([0, 1, 2, 3, 4, 5], 4, "data-parallel size 6 is not divisible"),
    ([3], 2, "need a data-parallel size > 1"),
    ([3], 3, "need a data-parallel size > 1"),
])
def test_invalid_replica_set(ranks, R, message):
    with pytest.raises(LayoutError, match=message):
        ReplicaSet(ranks, R)
    with pytest.raises(LayoutError, match=message):
        ReplicaLayout.from_dp_lists([ranks], R)


def test_layout_error_is_value_error():
    assert issubclass(LayoutError, ValueError)


@pytest.mark.parametrize("dp_lists, expert, message", [
    ([[0, 1], [1, 2]], [], "rank 1 appears in two rank lists of optimizer type 0"),
    ([[0, 1, 2, 3], [4, 5, 6, 3]], [], "rank 3 appears in two rank lists of optimizer type 0"),
    ([[0, 1], [2, 3]], [[0, 2], [2, 1]], "rank 2 appears in two rank lists of optimizer type 1"),
])
def test_rank_in_two_lists_of_same_type(dp_lists, expert, message):
    with pytest.raises(LayoutError, match=message):
        ReplicaLayout.from_dp_lists(dp_lists, 2, expert_dp_lists=expert)


def test_one_bad_list_among_good_ones():
    with pytest.raises(LayoutError, match="not divisible"):
        ReplicaLayout.from_dp_lists([[0, 1], [2, 3, 4]], 2)
    with pytest.raises(LayoutError, match="duplicates"):
        ReplicaLayout.from_dp_lists([[0, 1]], 2, expert_dp_lists=[[0, 0]])
