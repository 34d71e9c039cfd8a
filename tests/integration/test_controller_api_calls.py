"""The reference calls that feed the controller what a processor knows: tft_start_copy_os (a rank
copying its optimizer state is no saver), tft_report_load_ckpt_step (the loaded step is the last
completed one), tft_notify_controller_on_global_rank (the cluster manager names faulty ranks), with
four native processors in this process and a dump as the observable outcome."""
import pytest

from controller_harness import end_in_process_job, in_process_job, wait_until
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration
N = 4  # DP [0,1,2,3], R=2: shard 0 on ranks 0 and 2, shard 1 on ranks 1 and 3


@pytest.fixture
def job(job_env):
    procs = in_process_job(N)
    yield procs
    end_in_process_job(procs)


def savers_after(event_count=1):
    wait_until(lambda: len([e for e in ctl.controller_events() if e[1] == "savers"]) >= event_count, 10, "savers")
    return [d for _, k, d in ctl.controller_events() if k == "savers"]


def known(predicate, what):
    """Wait until the controller has processed the processors' status messages (sent asynchronously)."""
    wait_until(lambda: predicate(ctl.controller_ranks()), 10, what)


def test_a_rank_copying_its_state_is_no_saver(job):
    for p in job:
        p.start_updating(3)
        p.end_updating(3)
    job[1].start_copy()
    known(lambda ranks: [r["step"] for r in ranks] == [3] * N and ranks[1]["data"] == "copying", "rank 1 copying")
    ctl.tft_notify_controller_dump()
    assert savers_after() == ["type 0 step 3 [0,3]"]


def test_the_loaded_checkpoint_step_is_the_repair_step(job):
    for p in job:
        p.report_loaded_step(7)
    known(lambda ranks: [r["step"] for r in ranks] == [7] * N, "every rank at step 7")
    ctl.tft_notify_controller_dump()
    assert savers_after() == ["type 0 step 7 [0,1]"]
    with pytest.raises(ValueError, match="step -1 is negative"):
        job[0].report_loaded_step(-1)


def test_faulty_global_ranks_from_the_cluster_manager(job):
    reported = []
    ctl.tft_register_mindx_callback("report_fault_ranks", lambda faults: reported.append(faults))
    for p in job:
        p.start_updating(2)
        p.end_updating(2)
    known(lambda ranks: [r["step"] for r in ranks] == [2] * N, "every rank at step 2")
    ctl.tft_notify_controller_on_global_rank([2])
    assert savers_after() == ["type 0 step 2 [0,1]"]  # rank 2 (process/node fault) is not trusted
    assert reported == [{2: 1}]
