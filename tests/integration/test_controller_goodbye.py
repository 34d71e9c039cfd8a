"""Leaving on purpose is not a fault: a processor destroyed at the end of training says goodbye (the
controller logs "rank R left" once, declares nobody dead, starts no recovery), and a controller
destroyed normally says goodbye to its processors (they log that it closed, not that it was lost)."""
import re

import pytest

from controller_harness import Job, wait_until
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration


def test_normal_shutdown_of_the_processors_is_no_fault(tmp_path, job_env, capfd):
    job = Job(tmp_path, 4, idle_s=0)
    try:
        results = job.wait_results(range(4))
        assert all(r["result"] == "done" for r in results.values()), results
        assert all(p.wait(timeout=10) == 0 for p in job.procs.values())
        wait_until(lambda: ctl.controller_stats()["left"] == 4, 5, "every rank to have left")
        assert sorted(d for _, _, d in job.controller_events("left")) == [
            f"rank {r}: tft_destroy_processor" for r in range(4)]
        assert not job.controller_events("fault") and not job.controller_events("dead")
        assert ctl.controller_state() == "NORMAL" and ctl.controller_stats()["dead"] == 0
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
    log = capfd.readouterr().err
    for rank in range(4):
        assert len(re.findall(rf"rank {rank} left: tft_destroy_processor", log)) == 1, log
    assert "lost the connection of rank" not in log, log


def test_controller_destroyed_normally_tells_the_processors(tmp_path, job_env):
    job = Job(tmp_path, 2, idle_s=20)
    try:
        job.wait_ready()
        ctl.tft_destroy_controller()
        logs = [tmp_path / f"worker{r}.log" for r in range(2)]
        wait_until(lambda: all("the controller closed: controller destroyed" in p.read_text() for p in logs), 10,
                   "both processors to log the controller's goodbye")
        for path in logs:
            assert "lost the controller connection" not in path.read_text(), path.read_text()
    finally:
        for proc in job.procs.values():
            proc.kill()
            proc.wait(timeout=10)
        job.close()
