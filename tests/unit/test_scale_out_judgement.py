"""csrc/controller/scale_out.h through the bindings: when a job scaled in by elastic training grows back.
To the original size once every retired rank returned (a connected restarted process) and is ready; a set
still incomplete after the wait (MINDIO_SCALE_OUT_WAIT_S from the first return) grows part of the way with the
ready ones (the rest named absent), or, with none ready, is sent away."""
import pytest

from mindio_adaptor import _native as nat

LIVE = {"connected": True}
RETIRED = {"retired": True}
RETURNED = {"retired": True, "joining": True, "connected": True}
READY = {**RETURNED, "ready": True}


def judge(ranks, waited_ms=0, wait_ms=20000):
    return nat.judge_scale_out(ranks, waited_ms, wait_ms)


def test_nothing_while_no_retired_rank_returned():
    assert judge([LIVE, LIVE, LIVE, LIVE])["verdict"] == "nothing"
    j = judge([LIVE, LIVE, RETIRED, RETIRED])
    assert (j["verdict"], j["retired"], j["returned"]) == ("nothing", {2, 3}, set())


def test_starts_once_every_retired_rank_is_back_and_ready():
    j = judge([LIVE, LIVE, READY, READY])
    assert (j["verdict"], j["ready"]) == ("start", {2, 3})


@pytest.mark.parametrize("ranks, missing, sent_away", [
    ([LIVE, LIVE, READY, RETIRED], "ranks [3] have not returned", set()),
    ([LIVE, LIVE, READY, RETURNED], "ranks [3] returned but are not ready", {3}),
    # a returned process whose connection is gone counts as not returned
    ([LIVE, LIVE, READY, {**READY, "connected": False}], "ranks [3] have not returned", set()),
])
def test_an_incomplete_return_waits_then_grows_with_the_ready_ranks(ranks, missing, sent_away):
    waiting = judge(ranks, waited_ms=5000)
    assert waiting["verdict"] == "wait" and missing in waiting["why"], waiting
    late = judge(ranks, waited_ms=20000)
    assert (late["verdict"], late["partial"], late["ready"], late["absent"]) == ("start", True, {2}, {3}), late
    assert late["sent_away"] == sent_away
    assert late["why"].startswith("partial scale-out: after 20000 ms (MINDIO_SCALE_OUT_WAIT_S 20000 ms)"), late
    assert missing in late["why"] and "grows with the ready ranks [2] where their data-parallel slices are whole, " \
        "without ranks [3]" in late["why"], late["why"]


def test_a_whole_return_is_no_partial_one():
    j = judge([LIVE, LIVE, READY, READY], waited_ms=50000)
    assert (j["verdict"], j["partial"], j["absent"], j["sent_away"]) == ("start", False, set(), set())


def test_with_none_ready_after_the_wait_every_returned_process_is_sent_away():
    late = judge([LIVE, LIVE, RETURNED, RETIRED], waited_ms=20000)
    assert (late["verdict"], late["sent_away"]) == ("abandon", {2}), late
    assert late["why"].startswith("no scale-out: after 20000 ms (MINDIO_SCALE_OUT_WAIT_S 20000 ms)")
    assert "returned ranks [2] are sent away and the job goes on at its smaller size" in late["why"]


def test_an_unknown_rank_flag_is_refused():
    with pytest.raises(ValueError, match="unknown rank flag 'alive'"):
        judge([{"alive": True}])
