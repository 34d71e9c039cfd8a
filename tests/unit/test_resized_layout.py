"""recovery/resized_layout: while scaled in, the layout a rank reports to the controller and the ranks the
controller names are in the numbering of the job's start (the controller knows each process by the rank it
registered under); the scale-in numbered the survivors densely (core/layout/scale_in_plan)."""
import pytest

from recovery_fakes import session_at
from mindio_adaptor.core.layout.replica_layout import ReplicaLayout
from mindio_adaptor.core.layout.scale_in_plan import ScaleInRefused, plan_scale_in
from mindio_adaptor.recovery import resized_layout


class FakeLink:
    rank = 3

    def __init__(self):
        self.reports = []

    def report_layout(self, rank, info, domain=None):
        self.reports.append((rank, info))


def scaled_in_without_0_and_1():
    """dp4 R=2 lost ranks 0 and 1: survivors 2 and 3 are ranks 0 and 1 now."""
    session = session_at(6)
    session.scale_in = plan_scale_in([[0, 1, 2, 3]], {0, 1}, global_batch_size=16, micro_batch_size=2)
    return session


def test_ranks_go_between_the_start_and_the_current_numbering():
    session = scaled_in_without_0_and_1()
    assert resized_layout.start_ranks(session, [0, 1]) == [2, 3]
    assert resized_layout.current_ranks(session, [3, 2]) == [1, 0]
    with pytest.raises(ScaleInRefused, match="rank 1 does not survive the scale-in"):
        resized_layout.current_ranks(session, [1])


def test_before_a_scale_in_and_after_the_scale_out_the_numbering_is_the_start():
    session = session_at(6)
    assert resized_layout.start_ranks(session, [2, 0]) == [2, 0]
    assert resized_layout.current_ranks(session, [3]) == [3]


def test_the_reported_layout_names_the_start_ranks(monkeypatch):
    session = scaled_in_without_0_and_1()
    session.job.layout = ReplicaLayout.from_dp_lists([[0, 1]], replica_cnt=2)  # dp2 R=2, current numbering
    link = FakeLink()
    monkeypatch.setattr(resized_layout.processor_link, "current_or_none", lambda: link)
    resized_layout.report(session)
    [(rank, [entry])] = link.reports
    assert rank == 3 and entry["rank_list"] == [2, 3] and entry["replica_cnt"] == 2


def test_nothing_is_reported_without_a_link_or_a_layout(monkeypatch):
    session = scaled_in_without_0_and_1()
    monkeypatch.setattr(resized_layout.processor_link, "current_or_none", lambda: None)
    resized_layout.report(session)  # no link (no controller): nothing to tell
    link = FakeLink()
    monkeypatch.setattr(resized_layout.processor_link, "current_or_none", lambda: link)
    resized_layout.report(session)  # no layout (high availability off)
    assert link.reports == []
