"""csrc/controller/scale_out.h through the bindings: when a job scaled in by elastic training grows back.
Only to the original size: every retired rank returned (a connected restarted process) and ready; a set
still incomplete after the wait (MINDIO_SCALE_OUT_WAIT_S from the first return) is sent away."""
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


@pytest.mark.parametrize("ranks, missing", [
    ([LIVE, LIVE, READY, RETIRED], "ranks [3] have not returned"),
    ([LIVE, LIVE, READY, RETURNED], "ranks [3] returned but are not ready"),
    # a returned process whose connection is gone counts as not returned
    ([LIVE, LIVE, READY, {**READY, "connected": False}], "ranks [3] have not returned"),
])
def test_an_incomplete_return_waits_then_is_sent_away(ranks, missing):
    waiting = judge(ranks, waited_ms=5000)
    assert waiting["verdict"] == "wait" and missing in waiting["why"], waiting
    late = judge(ranks, waited_ms=20000)
    assert late["verdict"] == "abandon", late
    assert late["why"].startswith("no scale-out: after 20000 ms (MINDIO_SCALE_OUT_WAIT_S 20000 ms)") and missing in late["why"]
    assert "are sent away and the job goes on at its smaller size" in late["why"]


def test_an_unknown_rank_flag_is_refused():
    with pytest.raises(ValueError, match="unknown rank flag 'alive'"):
        judge([{"alive": True}])
