"""A replacement that cannot start, then a group restart, on the real megatron.training under `mindio-adaptor
launch` (dp4, R=2, worker reboot; the launcher hosts the controller). Rank 1 is SIGKILLed at step 3 and each of
its replacements exits 3 at once, so the survivors stay parked in the recovery that waits for it. After three
such exits the launcher stops rebooting the rank (a restart loop) and restarts the whole group.

Before, that group restart ended the job: the controller of the old generation counted each parked survivor
the restart stopped as one more fault and decided EXIT (86), after which nothing is restarted. Now the
controller is stopped first and the new generation gets a new one: it trains from the start to the
uninterrupted run's digest, and the launcher ends 0."""
import re
from pathlib import Path

import pytest

from mindio_adaptor.tiny.job import process_ids, run_training

pytestmark = pytest.mark.e2e
SCRIPT = str(Path(__file__).with_name("replacement_failing_at_start.py"))


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    faults = tmp_path_factory.mktemp("faults")
    env = {"MINDIO_FAULT_INJECT": "kill:rank=1,step=3", "MINDIO_FAULT_STATE_DIR": str(faults),
           "MINDIO_TEST_FAILING_RANK": "1"}
    return run_training(["--enable-high-availability", "--enable-worker-reboot"], env=env, script=SCRIPT,
                        launcher=("mindio_adaptor.launch", "--max-restarts", "4"), timeout=420)


def test_the_group_restart_trains_to_the_uninterrupted_digest(restarted, reference_runs):
    run = restarted.require_success()
    reference, _ = reference_runs("ha")
    assert run.digest == reference.digest
    assert run.losses == reference.losses


def test_the_restart_loop_then_the_group_restart_with_new_controllers(restarted):
    out = restarted.output
    assert out.count("this replacement cannot start (the test's fault)") == 3, out[-6000:]
    assert re.search(r"rank 1: no more reboots of this rank: restart loop", out), out[-6000:]
    assert "restarting the whole group (group restart 1 of 4)" in out
    assert re.search(r"group restart: this node's controller of the earlier generation \(pid \d+\) stopped", out)
    assert re.search(r"active controller started as pid \d+ on port \d+ for generation 1", out), out[-6000:]
    assert "generation 1: started ranks [0, 1, 2, 3]" in out
    assert "the recovery controller ended the job" not in out and "ENDED_BY_CONTROLLER" not in out, out[-6000:]
    assert "summary: 4 local workers exited 0; exit code 0; group restarts 1" in out


def test_the_parked_survivors_end_at_once_without_a_new_fault(restarted):
    """With their controller gone the survivors end by themselves or on the launcher's SIGTERM; none waits
    out --shutdown-timeout for a SIGKILL, and the controller decided nothing after the replacement's wait."""
    out = restarted.output
    restart = out.index("restarting the whole group")
    stops = [line for line in out[restart:].splitlines() if "(group restart)" in line]
    assert stops and not any("SIGKILL" in line for line in stops), stops
    assert len(re.findall(r"\] decision \w+: faults", out)) == 1, out[-6000:]
    seen = process_ids(out)
    assert all(len(set(seen[rank]["starting"])) == 2 for rank in (0, 2, 3)), seen  # generation 0, then 1
