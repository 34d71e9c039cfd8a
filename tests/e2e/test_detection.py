"""Detection on the real megatron.training (dp4, R=2, 4 gloo processes): a rank stopped by the OS for
longer than three heartbeat periods is a suspect, not a fault, whether it stalls a train step or the
final checkpoint save; a hung rank is found by the hang rule with no timeout variable set, named,
and the survivors' dying-gasp checkpoint resumes to the uninterrupted run. No process of a run is
left once it has ended."""
import os
import re
import signal
import threading
from datetime import datetime

import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
FREEZE_S = 7.0  # more than three 2 s heartbeat periods
_PID = re.compile(r"rank (\d+) pid (\d+) starting")


class Freezer:
    """SIGSTOPs a rank's process when a line matching `trigger` is printed, SIGCONTs it FREEZE_S later."""

    def __init__(self, plan):
        self.plan = list(plan)  # (trigger regex, rank)
        self.pids, self.frozen, self.timers = {}, [], []

    def __call__(self, line):
        m = _PID.search(line)
        if m:
            self.pids[int(m.group(1))] = int(m.group(2))
        for trigger, rank in list(self.plan):
            if re.search(trigger, line) and rank in self.pids:
                self.plan.remove((trigger, rank))
                os.kill(self.pids[rank], signal.SIGSTOP)
                self.frozen.append(rank)
                timer = threading.Timer(FREEZE_S, os.kill, (self.pids[rank], signal.SIGCONT))
                timer.start()
                self.timers.append(timer)


@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory):
    """Rank 2 stopped during step 4, rank 1 during the final checkpoint save."""
    ckpt = tmp_path_factory.mktemp("frozen") / "ckpt"
    freezer = Freezer([(r"iteration\s+3/", 2), (r"saving checkpoint at iteration\s+8 ", 1)])
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"], on_line=freezer)
    for timer in freezer.timers:
        timer.join()
    return run, ckpt, freezer


def test_a_rank_frozen_in_a_step_and_in_the_final_save_is_no_fault(frozen_run, reference_runs):
    run, ckpt, freezer = frozen_run
    run.require_success()
    assert freezer.frozen == [2, 1]
    reference, _ = reference_runs("ha")
    assert run.digest == reference.digest
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    for rank in (2, 1):
        assert re.search(rf"rank {rank} silent for \d+ ms with its connection open", run.output), rank
        assert re.search(rf"rank {rank} heard again after \d+ ms of silence: not a fault", run.output), rank
    assert "decision" not in run.output and "fault on rank" not in run.output and "hang:" not in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "8"
    assert run.leftover == []


def test_the_checkpoint_saved_through_a_freeze_loads(frozen_run, reference_runs):
    _, ckpt, _ = frozen_run
    resumed = run_training([*HA, "--load", str(ckpt)]).require_success()
    assert "loaded checkpoint" in resumed.output and resumed.losses == {}
    assert resumed.digest == reference_runs("ha")[0].digest
    assert resumed.leftover == []


def _times(output, pattern):
    """Wall-clock times of the lines matching pattern (both the Python and the C++ log formats)."""
    found = []
    for line in output.splitlines():
        if re.search(pattern, line):
            m = re.search(r"(\d\d:\d\d:\d\d\.\d{3})", line)
            found.append(datetime.strptime(m.group(1), "%H:%M:%S.%f"))
    return found


@pytest.fixture(scope="module")
def hung_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hung")
    env = {"MINDIO_FAULT_INJECT": "hang:rank=3,step=5", "MINDIO_FAULT_STATE_DIR": str(tmp / "faults")}
    for name in ("MINDIO_STEP_TIMEOUT_S", "MINDIO_STOP_TIMEOUT_S", "MINDIO_HANG_FLOOR_S"):
        assert name not in os.environ
    run = run_training([*HA, "--save", str(tmp / "ckpt"), "--save-interval", "1000"], env=env)
    return run, tmp / "ckpt"


def test_a_hang_is_found_within_15_s_with_default_settings_and_the_rank_named(hung_run):
    run, ckpt = hung_run
    assert run.returncode != 0
    fired = _times(run.output, r"fault injection: firing hang on rank 3 at step 5")
    judged = _times(run.output, r"\[controller rank 0\] hang: ")
    assert len(fired) == 1 and len(judged) == 1, run.output[-4000:]
    assert 0 < (judged[0] - fired[0]).total_seconds() <= 15.0
    assert re.search(r"hang: rank \d's step has run \d+ ms, past its limit of 12000 ms.*furthest behind: \[3\]",
                     run.output)
    assert "hang rule: step limit 12.0 s (floor" in run.output
    assert "action stop failed on rank 3" in run.output  # the hung rank never parks: it may not save
    assert "dump of step 4 published" in run.output
    assert "the training thread is hung: ending the process" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert run.leftover == []


def test_the_dump_after_a_hang_resumes_like_the_uninterrupted_run(hung_run, reference_runs):
    _, ckpt = hung_run
    resumed = run_training([*HA, "--load", str(ckpt)]).require_success()
    assert sorted(resumed.losses) == [5, 6, 7, 8]
    assert resumed.digest == reference_runs("ha")[0].digest
