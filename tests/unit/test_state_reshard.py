"""core/state_reshard's plan: which rank sends which elements of which parameter to which, from the
survivors' shards at the smaller size to the shards of the original size."""
import pytest

from mindio_adaptor.core.state_reshard import Piece, ReshardError, Span, plan_reshard

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
