"""The C++ replica manager against the reference's examples, a brute-force oracle, and the Python
replica layout (mindio_adaptor.core.layout.replica_layout), which must give identical answers."""
import itertools
import random

import pytest

from mindio_adaptor import _native as nat
from mindio_adaptor.core.layout.replica_layout import ReplicaLayout


def manager(*sets):
    m = nat.ReplicaManager()
    for opt_type, replica_cnt, ranks in sets:
        m.add(opt_type, replica_cnt, 0, ranks)
    return m


def test_reference_example_savers():
    savers, missing = manager((0, 2, [0, 1, 2, 3])).savers({3})
    assert savers == {(0, 0, 0): 0, (0, 0, 1): 1}
    assert missing == []


def test_reference_example_repair_pairs():
    assert manager((0, 2, [0, 1, 2, 3])).repair_pairs({0, 3}) == {0: ([(2, 0), (1, 3)], [])}


def test_no_complete_replica_is_detected():
    m = manager((0, 2, [0, 1, 2, 3]))
    savers, missing = m.savers({1, 3})
    assert missing == [(0, 0, 1)] and savers == {(0, 0, 0): 0}
    assert m.repair_pairs({1, 3}) == {0: ([], [1, 3])}


def test_identical_report_is_accepted_once_and_conflicts_are_refused():
    m = manager((0, 2, [0, 1, 2, 3]))
    m.add(0, 2, 0, [0, 1, 2, 3])
    assert len(m.rank_lists()) == 1
    with pytest.raises(ValueError, match="appears in two rank lists"):
        m.add(0, 2, 0, [3, 4])
    with pytest.raises(ValueError, match="replica count"):
        m.add(0, 4, 0, [0, 1, 2, 3])
    m.add(1, 4, 0, [0, 1, 2, 3])  # another optimizer type may reuse the ranks
    assert len(m.rank_lists()) == 2


@pytest.mark.parametrize("ranks,replica_cnt,shift,reason", [
    ([0, 1, 2], 2, 0, "not divisible"),
    ([], 1, 0, "empty"),
    ([0, 0], 1, 0, "duplicates"),
    ([5], 2, 0, "data-parallel size > 1"),
    ([0, -1], 1, 0, "negative"),
    ([0, 1], 0, 0, "replica count"),
    ([0, 1], 2, 1, "replica_shift"),
])
def test_malformed_rank_lists_are_refused(ranks, replica_cnt, shift, reason):
    with pytest.raises(ValueError, match=reason):
        nat.ReplicaManager().add(0, replica_cnt, shift, ranks)


def oracle_savers(ranks, replica_cnt, unavailable):
    """Brute force from the definition: the holders of shard j are the ranks at positions p with
    p % g == j, in position order; the saver is the first available one."""
    g = len(ranks) // replica_cnt
    savers, missing = {}, []
    for j in range(g):
        holders = [ranks[p] for p in range(len(ranks)) if p % g == j]
        alive = [r for r in holders if r not in unavailable]
        if alive:
            savers[j] = alive[0]
        else:
            missing.append(j)
    return savers, missing


def oracle_pairs(ranks, replica_cnt, bad):
    """A bad rank's source is the nearest healthy holder of the same shard walking forward
    cyclically through the replica groups."""
    d, g = len(ranks), len(ranks) // replica_cnt
    pairs, orphans = [], []
    for p, dst in enumerate(ranks):
        if dst not in bad:
            continue
        ring = [ranks[(p + k * g) % d] for k in range(1, replica_cnt)]
        healthy = [r for r in ring if r not in bad]
        (pairs.append((healthy[0], dst)) if healthy else orphans.append(dst))
    return pairs, orphans


def random_layouts(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        replica_cnt = rng.choice([1, 2, 2, 3, 4])
        g = rng.randint(1, 5)
        groups = rng.randint(1, 3)
        if replica_cnt == 1 and g == 1:
            g = 2
        world = list(range(replica_cnt * g * groups + rng.randint(0, 4)))
        rng.shuffle(world)
        dp_lists = [world[i * replica_cnt * g:(i + 1) * replica_cnt * g] for i in range(groups)]
        bad = set(rng.sample(world, rng.randint(0, min(len(world), 6))))
        yield dp_lists, replica_cnt, bad


def test_random_layouts_against_brute_force_oracle():
    for dp_lists, replica_cnt, bad in random_layouts(seed=7, count=400):
        m = manager(*[(0, replica_cnt, ranks) for ranks in dp_lists])
        savers, missing = m.savers(bad)
        pairs = m.repair_pairs(bad)
        all_pairs, all_orphans = [], []
        for gi, ranks in enumerate(dp_lists):
            o_savers, o_missing = oracle_savers(ranks, replica_cnt, bad)
            assert {s: r for (t, g, s), r in savers.items() if g == gi} == o_savers
            assert [s for (t, g, s) in missing if g == gi] == o_missing
            o_pairs, o_orphans = oracle_pairs(ranks, replica_cnt, bad)
            all_pairs += o_pairs
            all_orphans += o_orphans
        assert pairs == {0: (all_pairs, all_orphans)}


def test_random_layouts_against_python_replica_layout():
    rng = random.Random(11)
    for dp_lists, replica_cnt, bad in random_layouts(seed=13, count=300):
        expert = [rng.sample(ranks, len(ranks)) for ranks in dp_lists] if rng.random() < 0.5 else []
        layout = ReplicaLayout.from_dp_lists(dp_lists, replica_cnt, expert_dp_lists=expert)
        m = nat.ReplicaManager()
        for info in layout.to_reference():
            m.add(info["optimizer_type"], info["replica_cnt"], info["replica_shift"], info["rank_list"])
        py_savers, py_missing = layout.savers(bad)
        c_savers, c_missing = m.savers(bad)
        assert c_savers == {(k.optimizer_type, k.group_index, k.shard): r for k, r in py_savers.items()}
        assert c_missing == [(k.optimizer_type, k.group_index, k.shard) for k in py_missing]
        py_pairs = layout.repair_pairs(bad)
        assert m.repair_pairs(bad) == {t: (pairs, orphans) for t, (pairs, orphans) in py_pairs.items()}


def test_every_subset_of_a_small_layout_matches_python():
    dp_lists = [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9, 11]]
    for replica_cnt in (1, 2, 3):
        layout = ReplicaLayout.from_dp_lists(dp_lists, replica_cnt)
        m = nat.ReplicaManager()
        for info in layout.to_reference():
            m.add(info["optimizer_type"], info["replica_cnt"], 0, info["rank_list"])
        for size in range(4):
            for bad in itertools.combinations(range(12), size):
                py_savers, py_missing = layout.savers(bad)
                c_savers, c_missing = m.savers(set(bad))
                assert c_savers == {(k.optimizer_type, k.group_index, k.shard): r for k, r in py_savers.items()}
                assert len(c_missing) == len(py_missing)
                assert m.repair_pairs(set(bad)) == {t: v for t, v in layout.repair_pairs(bad).items()}
