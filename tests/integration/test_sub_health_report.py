"""A rank that reports sub-health (ReportState.SUB_HEALTH with a code, e.g. after silent data corruption named
its copy) is flagged and logged by the real controller, and training goes on: it is no fault."""
import time

import pytest

from controller_harness import end_in_process_job, in_process_job, wait_until
from mindio_adaptor.core.detection.enums import ReportState
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration


@pytest.fixture
def processors(job_env):
    procs = in_process_job(4)
    yield procs
    end_in_process_job(procs)


def _events(*kinds):
    return [detail for _, kind, detail in ctl.controller_events() if kind in kinds]


def test_a_sub_health_report_flags_the_rank_and_changes_nothing_else(processors):
    processors[1].report_error(int(ReportState.SUB_HEALTH), "MINDIO-SDC")
    wait_until(lambda: "sub-healthy" in ctl.controller_ranks()[1]["flags"], 5, "rank 1 flagged sub-healthy")
    assert _events("sub_health") == ["rank 1: MINDIO-SDC"]
    processors[1].report_error(int(ReportState.SUB_HEALTH), "MINDIO-SDC")  # said again: said once
    processors[1].start_updating(0)
    processors[1].end_updating(1)  # the rank goes on training
    time.sleep(0.5)
    assert len(_events("sub_health")) == 1
    assert ctl.controller_state() == "NORMAL"
    assert [r for r in range(4) if "sub-healthy" in ctl.controller_ranks()[r]["flags"]] == [1]
    assert not _events("fault", "decision")


def test_a_report_state_beyond_sub_health_is_refused_by_the_processor(processors):
    with pytest.raises(ValueError, match=r"report_state 10 is out of range 0\.\.9"):
        processors[0].report_error(10, "")
