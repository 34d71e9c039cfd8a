"""The fingerprint the holders of an optimizer shard compare, and what their fingerprints say."""
import pytest
import torch

from mindio_adaptor.core.detection.fault_inject import flip_bit
from mindio_adaptor.core.layout.holder_vote import compare_holders, judge_copies
from mindio_adaptor.core.layout.shard_fingerprint import BLOCK, ROW, fingerprint, fingerprints, grouped_fingerprints


def _shard(seed=0, n=3 * ROW + 17):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g), torch.rand(n, generator=g), torch.tensor(7.0)]


def test_equal_bytes_give_equal_fingerprints_and_any_flipped_bit_changes_it():
    shard = _shard()
    before = fingerprints(shard)
    assert fingerprints([t.clone() for t in shard]) == before
    for bit in (0, 1, 22, 30, 31):
        copy = [t.clone() for t in shard]
        copy[1].view(torch.int32)[ROW + 5] ^= (1 << bit) if bit < 31 else -(1 << 31)
        after = fingerprints(copy)
        assert after[1] != before[1] and after[0] == before[0] and after[2] == before[2], bit


def test_swapped_words_change_the_weighted_sum():
    t = torch.arange(2 * ROW, dtype=torch.float32)
    swapped = t.clone()
    swapped[[3, ROW + 9]] = swapped[[ROW + 9, 3]]
    plain_bytes, plain_sum, plain_weighted = fingerprint(t)
    assert fingerprint(swapped)[:2] == (plain_bytes, plain_sum)
    assert fingerprint(swapped)[2] != plain_weighted


def test_shards_larger_than_one_block_and_odd_byte_counts():
    big = torch.randn(BLOCK + ROW + 3)
    changed = big.clone()
    changed[BLOCK + 1] += 1.0
    assert fingerprint(big) != fingerprint(changed)
    assert fingerprint(big)[0] == big.numel() * 4
    odd = torch.arange(5, dtype=torch.bfloat16)  # 10 bytes: summed as bytes
    assert fingerprint(odd)[0] == 10 and fingerprint(odd) != fingerprint(odd + 1)


def test_the_injected_flip_is_seen_by_the_fingerprint():
    shard = _shard()
    before = fingerprints(shard)
    said = flip_bit(shard)
    assert said.startswith("bit 22 of element") and " -> " in said
    assert fingerprints(shard)[0] != before[0] and fingerprints(shard)[1:] == before[1:]


def test_agreeing_holders_say_nothing():
    prints = fingerprints(_shard())
    assert compare_holders(4, [1, 3], [prints, list(prints)]) is None


def test_two_holders_disagree_without_a_majority():
    good = fingerprints(_shard())
    shard = _shard()
    flip_bit(shard)
    dispute = compare_holders(6, [1, 3], [fingerprints(shard), good])
    assert dispute.tensors == (0,) and dispute.holders == (1, 3) and dispute.step == 6
    assert dispute.majority == ()


def _judged(earlier_shards, recomputed_shard):
    prints = [fingerprints(s) for s in earlier_shards]
    dispute = compare_holders(6, [1, 3], prints)
    earlier = [{i: s[i] for i in dispute.tensors} for s in earlier_shards]
    recomputed = {i: recomputed_shard[i] for i in dispute.tensors}
    return judge_copies(dispute, fingerprints(recomputed_shard), earlier, recomputed)


def test_a_copy_equal_to_the_recomputed_one_was_good():
    flipped = _shard()
    flip_bit(flipped)
    assert _judged([flipped, _shard()], _shard()) == ((1,), "equal to the recomputed copy")


def test_without_an_exact_copy_the_copy_farthest_where_the_copies_differ_was_corrupted():
    # The flipped value fed the common gradients: both copies moved a little, the flipped one far.
    recomputed = _shard()
    polluted = [t + 1e-6 if t.dim() else t for t in recomputed]
    flipped = [t.clone() for t in polluted]
    flip_bit(flipped)
    corrupted, rule = _judged([polluted, flipped], recomputed)
    assert corrupted == (3,) and rule.startswith("farthest from the recomputed values where the copies differ (rank 1: ")


def test_copies_equally_far_from_the_recomputed_one_leave_every_holder_suspect():
    recomputed = _shard()
    up = [t + 1e-3 if t.dim() else t for t in recomputed]
    down = [t - 1e-3 if t.dim() else t for t in recomputed]
    corrupted, rule = _judged([up, down], recomputed)
    assert corrupted == (1, 3) and rule.startswith("no copy is 10x farther than another")


def test_a_nan_is_infinitely_far():
    recomputed = _shard()
    broken = [t.clone() for t in recomputed]
    broken[1][4] = float("nan")
    nudged = [t.clone() for t in recomputed]
    nudged[1][4] += 1e-6
    assert _judged([nudged, broken], recomputed)[0] == (3,)


def test_three_holders_have_a_majority():
    good, other = fingerprints(_shard()), fingerprints(_shard(seed=2))
    dispute = compare_holders(2, [0, 4, 8], [good, other, good])
    assert dispute.majority == (0, 8) and dispute.tensors == (0, 1)
    tie = compare_holders(2, [0, 4], [good, other])
    assert tie.majority == ()


def test_holders_with_differently_long_shards_disagree_on_the_missing_tensors():
    prints = fingerprints(_shard())
    dispute = compare_holders(1, [0, 1], [prints, prints[:2]])
    assert dispute.tensors == (2,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_fingerprint_of_an_empty_tensor(dtype):
    assert fingerprint(torch.empty(0, dtype=dtype)) == (0, 0, 0)


def test_grouped_fingerprints_see_every_flipped_bit_and_group_a_small_tensor_shard_as_one():
    shard = _shard()  # two tensors of 3 rows and a bit, a scalar: one group
    grouped = grouped_fingerprints(shard)
    assert len(grouped) == 1 and grouped == grouped_fingerprints([t.clone() for t in shard])
    assert grouped[0][0] == sum(t.numel() * 4 for t in shard)
    for position in range(3):
        copy = [t.clone() for t in shard]
        copy[position].view(torch.int32).reshape(-1)[-1] ^= 1 << 12
        assert grouped_fingerprints(copy) != grouped, position


def test_grouped_fingerprints_keep_groups_within_a_block_and_odd_byte_counts_alone():
    shard = [torch.ones(BLOCK // 2 + 1), torch.ones(BLOCK // 2 + 1), torch.ones(BLOCK + 1),
             torch.ones(3, dtype=torch.bfloat16), torch.ones(5)]
    grouped = grouped_fingerprints(shard)
    # the first alone (the second would pass BLOCK), the larger-than-a-block one alone, the 6-byte one alone,
    # the second and the last together
    assert [print_[0] for print_ in grouped] == [(BLOCK // 2 + 1) * 4, (BLOCK + 1) * 4, 6, (BLOCK // 2 + 1 + 5) * 4]
