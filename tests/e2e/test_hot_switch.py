"""Hot switch on the real megatron.training (dp4, R=2, 4 gloo processes) under `mindio-adaptor launch` with a warm
spare: `mindio-adaptor drain --rank 1 --after-step 5` against the controller's status server moves rank 1 to a
new process while the job runs. Every rank holds after step 5; the old process of rank 1 exits 0; the launcher
hands the rank to its warm spare; the new process gets rank 1's shard from its replica peer; training goes on
at step 6. The run ends with the uninterrupted run's digest and losses, each step's loss line once (no step
recomputed), and nothing is counted as a fault. One run, checked several ways."""
import contextlib
import io
import re
import threading

import pytest

from mindio_adaptor.cli import build_parser, main as cli_main
from mindio_adaptor.tiny_job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1", "--spare-workers", "1")
TOKEN = "hot-switch-e2e-token-0123456789abcdef"
FIRST_STEPS = re.compile(r"iteration\s+2/")
STATUS_PAGE = re.compile(r"status page on http://127\.0\.0\.1:(\d+)/")  # the launcher's controller says so


class Drainer:
    """Once the status page's port is printed and a first step completed, runs `mindio-adaptor drain --rank 1
    --after-step 5 --wait 120` (its main, in this process)."""

    def __init__(self):
        self.port, self.thread, self.code, self.printed = None, None, None, ""

    def __call__(self, line):
        m = STATUS_PAGE.search(line)
        if m:
            self.port = int(m.group(1))
        if self.thread is None and self.port and FIRST_STEPS.search(line):
            self.thread = threading.Thread(target=self._drain, daemon=True)
            self.thread.start()

    def _drain(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                self.code = cli_main(["drain", "--controller", f"127.0.0.1:{self.port}", "--token", TOKEN,
                                      "--rank", "1", "--after-step", "5", "--wait", "120"])
            except SystemExit as err:
                self.code = err.code
            except Exception as err:  # noqa: BLE001 - the test names it
                self.code = f"{type(err).__name__}: {err}"
        self.printed = out.getvalue()


@pytest.fixture(scope="module")
def switched_run():
    build_parser()  # imports every subcommand's module now, not while the job's first steps run
    drainer = Drainer()
    run = run_training(FLAGS, launcher=LAUNCH, on_line=drainer,
                       env={"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN})
    if drainer.thread is not None:
        drainer.thread.join(130)
    return run, drainer


def test_the_switched_run_ends_as_the_uninterrupted_one_with_no_step_recomputed(switched_run, reference_runs):
    run, drainer = switched_run
    run.require_success()
    reference, _ = reference_runs("ha")
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # each step's line once: nothing done twice
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_drain_moved_rank_1_after_step_5(switched_run):
    run, drainer = switched_run
    assert drainer.code == 0, (drainer.code, drainer.printed)
    assert "hot switch of ranks [1] asked for after step 5" in drainer.printed
    assert "hot switch: training goes on" in drainer.printed
    assert "training paused after step 5 for the hot switch of ranks [1]: all 4 ranks hold" in run.output
    assert "ranks [1] switched to new processes, training resumes at step 5" in run.output


def test_the_old_process_exits_0_and_a_warm_spare_takes_the_rank(switched_run):
    run, _ = switched_run
    spare = re.search(r"warm spare workers started: pids \[(\d+)\]", run.output)
    assert spare, run.output[-3000:]
    handed = re.search(rf"rank 1 \(local rank 1, pid (\d+)\) handed its rank over \(hot switch\); its new process "
                       rf"is pid {spare.group(1)}, a warm spare", run.output)
    assert handed, run.output[-5000:]
    assert f"rank 1: its old process (pid {handed.group(1)}) ended after handing its rank over: exit code 0" in run.output
    assert "this rank is handed over to a new process after step 5; this process exits 0" in run.output
    assert re.search(r"rank 1\] INFO warm spare: took rank 1 for a hot switch \(built as stand-in rank 1\)", run.output)
    assert re.search(r"repair of step 5: received my optimizer shard \(\d+ tensors, \d+ bytes\) from rank 3",
                     run.output)
    seen = process_ids(run.output)
    for rank in (0, 2, 3):
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[1]["starting"])) == 2, seen


def test_a_hot_switch_is_no_fault(switched_run):
    run, _ = switched_run
    assert "fault on rank" not in run.output
    assert "decision " not in run.output
    assert "restart 1 of 1" not in run.output  # not counted against --max-restarts
