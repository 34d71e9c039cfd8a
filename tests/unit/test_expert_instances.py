"""Optimizer instances chosen over whole expert slices, so that the holders of dense and expert shards
sit on different nodes (core/layout/expert_instances, and ReplicaLayout with expert lists)."""
import random

import pytest

from mindio_adaptor.core.layout import expert_instances
from mindio_adaptor.core.layout.expert_instances import choose_instances, crowded_under, expert_slices, groups_under
from mindio_adaptor.core.layout.replica_layout import LayoutError, ReplicaLayout, ReplicaSet

DENSE_DP8 = [list(range(8))]
EXPERT_DP8_EP2 = [[0, 2, 4, 6], [1, 3, 5, 7]]  # Megatron's expert DP lists of dp8 with EP 2


def nodes(names: str):
    return {rank: name for rank, name in enumerate(names)}


def test_a_slice_is_one_position_of_every_expert_list():
    assert expert_slices(EXPERT_DP8_EP2) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert expert_slices([[0, 1], [2, 3, 4]]) is None


def test_block_placement_keeps_megatrons_consecutive_slices():
    instances, crowded = choose_instances(DENSE_DP8, EXPERT_DP8_EP2, 2, nodes("aaaabbbb"))
    assert instances == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert crowded == 0


def test_slices_alternating_over_nodes_are_laid_out_across_them():
    node_of = nodes("aabbaabb")
    assert crowded_under([(0, 1, 2, 3), (4, 5, 6, 7)], DENSE_DP8 + EXPERT_DP8_EP2, node_of) == 8
    instances, crowded = choose_instances(DENSE_DP8, EXPERT_DP8_EP2, 2, node_of)
    assert crowded == 0
    assert instances == [(0, 1, 4, 5), (2, 3, 6, 7)]


def test_every_dense_holder_row_is_an_expert_holder_row():
    # Megatron all-reduces dense shards over the experts' inter-instance group.
    rng = random.Random(7)
    for _ in range(40):
        node_of = {rank: rng.choice("abc") for rank in range(16)}
        dense = [list(range(0, 16, 2)), list(range(1, 16, 2))]  # TP 2
        experts = [[r for r in range(16) if (r // 2) % 2 == e and r % 2 == t] for t in range(2) for e in range(2)]
        chosen = choose_instances(dense, experts, 2, node_of)
        assert chosen is not None
        instances, _ = chosen
        rows = {r: row for ranks in dense for row in zip(*groups_under(instances, ranks)) for r in row}
        for ranks in experts:
            for row in zip(*groups_under(instances, ranks)):
                assert all(rows[r] == row for r in row)


def test_no_partition_can_spread_then_the_fewest_crowded_is_kept():
    # dp4, EP 2: each expert list is one row of holders, whatever the instances; ranks 0 and 2 share a node.
    instances, crowded = choose_instances([[0, 1, 2, 3]], [[0, 2], [1, 3]], 2, nodes("abab"))
    assert instances == [(0, 1), (2, 3)]
    assert crowded == 4


def test_lists_of_unequal_length_are_left_to_each_list():
    assert choose_instances([[0, 1, 2, 3]], [[0, 1], [2, 3, 4, 5]], 2, nodes("abab")) is None


def test_the_search_stops_at_its_budget(monkeypatch):
    scored = []
    monkeypatch.setattr(expert_instances, "PARTITION_BUDGET", 5)
    monkeypatch.setattr(expert_instances, "_crowded_rows", lambda cut, node_of: scored.append(1) or 1)
    # One node: nothing spreads, so the search would score all 462 partitions of 12 slices.
    chosen = choose_instances([list(range(24))], [list(range(0, 24, 2)), list(range(1, 24, 2))], 2, nodes("a" * 24))
    assert len(scored) == 2 + 5  # the consecutive and strided cuts, then the budget
    assert chosen[0] == [tuple(range(12)), tuple(range(12, 24))]  # none better: Megatron's is kept


def test_the_layout_cuts_every_list_by_the_chosen_instances():
    layout = ReplicaLayout.from_dp_lists(DENSE_DP8, 2, node_of=nodes("aabbaabb"), expert_dp_lists=EXPERT_DP8_EP2)
    assert layout.instances == [(0, 1, 4, 5), (2, 3, 6, 7)]
    assert [s.replica_groups for s in layout.sets] == [[(0, 1, 4, 5), (2, 3, 6, 7)], [(0, 4), (2, 6)],
                                                       [(1, 5), (3, 7)]]
    assert all(s.spread_across_nodes for s in layout.sets)
    assert layout.set_of(1).peers(1) == (3,) and layout.set_of(1, 1).peers(1) == (3,)


def test_without_nodes_the_layout_is_megatrons():
    layout = ReplicaLayout.from_dp_lists(DENSE_DP8, 2, expert_dp_lists=EXPERT_DP8_EP2)
    assert layout.instances is None
    assert [s.replica_groups for s in layout.sets] == [[(0, 1, 2, 3), (4, 5, 6, 7)], [(0, 2), (4, 6)],
                                                       [(1, 3), (5, 7)]]


@pytest.mark.parametrize("groups, message", [
    ([(0, 1), (2,)], "not 2 ascending groups of 2"),
    ([(1, 0), (2, 3)], "not 2 ascending groups of 2"),
    ([(0, 1), (2, 4)], "do not hold the rank list"),
])
def test_given_groups_must_cut_the_list(groups, message):
    with pytest.raises(LayoutError, match=message):
        ReplicaSet([0, 1, 2, 3], 2, groups=groups)
