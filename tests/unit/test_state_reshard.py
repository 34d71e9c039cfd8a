"""core/layout/state_reshard: the plan (which rank sends which elements of which parameter to which, from the
survivors' shards at the smaller size to the shards of the original size), and the exchange between four
real gloo processes: a state held by two ranks, cut at one set of boundaries, arrives bit-exact at four
ranks cut at other boundaries (the survivors' shards at dp2 become the shards of dp4), in two dtypes, with
nothing sent that a rank holds itself."""
import pytest
import torch

from recovery_fakes import run_ranks
from mindio_adaptor.core.layout.state_reshard import Piece, ReshardError, Slot, Span, plan_reshard, reshard_in_group

FP32 = (("exp_avg", "torch.float32"), ("param", "torch.float32"))


def span(start, end, fields=FP32):
    return Span(start, end, fields)


def test_dp2_r2_to_dp4_r2_each_rank_copies_its_own_and_the_returned_ones_are_spread():
    # At dp2 R=2 each survivor holds all of "w" (10 elements); at dp4 R=2 each instance of two ranks halves it.
    held = {0: {"w": span(0, 10)}, 1: {"w": span(0, 10)}}
    wanted = {0: {"w": span(0, 5)}, 1: {"w": span(5, 10)}, 2: {"w": span(0, 5)}, 3: {"w": span(5, 10)}}
    assert plan_reshard(held, wanted) == [Piece("w", 0, 5, 0, 0), Piece("w", 5, 10, 1, 1),
                                          Piece("w", 0, 5, 0, 2), Piece("w", 5, 10, 1, 3)]


def test_a_wanted_range_across_two_holders_comes_in_two_pieces():
    held = {0: {"w": span(0, 6), "b": span(0, 3)}, 1: {"w": span(6, 10)}}
    wanted = {2: {"w": span(4, 8), "b": span(1, 3)}}
    assert plan_reshard(held, wanted) == [Piece("b", 1, 3, 0, 2), Piece("w", 4, 6, 0, 2), Piece("w", 6, 8, 1, 2)]


def test_the_load_goes_to_the_holder_that_sent_least():
    held = {0: {"a": span(0, 8), "b": span(0, 2)}, 1: {"a": span(0, 8), "b": span(0, 2)}}
    wanted = {2: {"a": span(0, 8)}, 3: {"b": span(0, 2)}}
    assert [(p.key, p.src) for p in plan_reshard(held, wanted)] == [("a", 0), ("b", 1)]


def test_empty_spans_need_nothing_and_hold_nothing():
    held = {0: {"w": span(3, 3)}, 1: {"w": span(0, 4)}}
    assert plan_reshard(held, {2: {"w": span(2, 2)}, 3: {"w": span(0, 4)}}) == [Piece("w", 0, 4, 1, 3)]


def test_elements_no_rank_holds_are_named():
    held = {0: {"w": span(0, 4)}}
    with pytest.raises(ReshardError,
                       match=r"no rank holds element 4 of w \(rank 2 wants \[0, 6\); held: \[\(0, 0, 4\)\]"):
        plan_reshard(held, {2: {"w": span(0, 6)}})
    with pytest.raises(ReshardError, match="no rank holds element 0 of b .*held: nowhere"):
        plan_reshard(held, {2: {"b": span(0, 1)}})


def test_holder_and_receiver_must_keep_the_same_tensors():
    held = {0: {"w": span(0, 4, (("param", "torch.float32"),))}}
    with pytest.raises(ReshardError, match=r"w: rank 0 holds .*'param'.*, rank 1 wants .*'exp_avg'"):
        plan_reshard(held, {1: {"w": span(0, 4)}})


# ---- the exchange, four real processes -----------------------------------------------------------------

SIZES = {"embedding": 37, "layer.weight": 64, "layer.bias": 8, "norm": 5}


def _truth():
    g = torch.Generator().manual_seed(7)
    return {key: {"param": torch.randn(n, generator=g), "exp_avg_sq": torch.rand(n, generator=g).to(torch.bfloat16)}
            for key, n in SIZES.items()}


def _cut(parts: int, rank: int) -> dict:
    """Rank `rank`'s ranges when the parameters, laid end to end, are cut into `parts` equal shards."""
    total = sum(SIZES.values())
    lo, hi = rank * total // parts, (rank + 1) * total // parts
    ranges, offset = {}, 0
    for key, n in SIZES.items():
        start, end = max(lo, offset), min(hi, offset + n)
        if start < end:
            ranges[key] = (start - offset, end - offset)
        offset += n
    return ranges


def _slots(ranges: dict, fill=None) -> dict:
    truth = _truth()
    return {key: Slot(a, {name: (t[a:b].clone() if fill is None else torch.full((b - a,), fill, dtype=t.dtype))
                          for name, t in truth[key].items()}) for key, (a, b) in ranges.items()}


def _reshard(rank):
    held = _slots(_cut(2, rank)) if rank < 2 else {}  # ranks 2 and 3 returned with nothing
    wanted = _slots(_cut(4, rank), fill=float("nan"))
    pieces, received = reshard_in_group(None, held, wanted)
    truth = _truth()
    exact = all(torch.equal(t, truth[key][name][slot.start:slot.start + t.numel()])
                for key, slot in wanted.items() for name, t in slot.tensors.items())
    return pieces, received, exact


def test_the_survivors_state_arrives_bit_exact_at_the_new_shards():
    results = run_ranks(4, _reshard, timeout=120)
    assert all(status == "ok" for status, _ in results.values()), results
    results = {rank: value for rank, (_, value) in results.items()}
    assert all(exact for _, _, exact in results.values())
    assert len({pieces for pieces, _, _ in results.values()}) == 1  # one plan, computed alike everywhere
    total = sum(SIZES.values())
    # float32 param + bfloat16 moment per element; rank 0's new quarter lies inside its old half
    assert results[0][1] == 0
    assert results[2][1] + results[3][1] == (total - total // 2) * 6
    assert results[2][1] > 0 and results[3][1] > 0
