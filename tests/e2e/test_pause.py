"""Pause and continue on the real megatron.training (dp4, R=2, 4 gloo processes): `mindio-adaptor pause`
against the in-job controller's status server holds every rank after step 5 for 3 s; the run then ends
with the uninterrupted run's digest and losses, with no recovery of any kind. One paused run, checked
several ways."""
import contextlib
import io
import re
import threading

import pytest

from mindio_adaptor.cli import build_parser, main as cli_main
from mindio_adaptor.tiny_job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
TOKEN = "pause-e2e-token-0123456789abcdef"
HOLD_S = 3.0
_STATUS_PAGE = re.compile(r"status page at http://127\.0\.0\.1:(\d+)/")


class Pauser:
    """Once the status page's port is printed and every rank registered, runs `mindio-adaptor pause
    --after-step 5` (its main, in this process: a new interpreter takes longer to start than the tiny job's
    first five steps)."""

    def __init__(self):
        self.port, self.thread, self.code, self.printed = None, None, None, ""

    def __call__(self, line):
        m = _STATUS_PAGE.search(line)
        if m:
            self.port = int(m.group(1))
        if self.thread is None and self.port and "state INIT -> NORMAL" in line:
            self.thread = threading.Thread(target=self._pause, daemon=True)
            self.thread.start()

    def _pause(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                self.code = cli_main(["pause", "--controller", f"127.0.0.1:{self.port}", "--token", TOKEN,
                                      "--after-step", "5", "--hold", str(HOLD_S), "--wait", "60"])
            except SystemExit as err:
                self.code = err.code
        self.printed = out.getvalue()


@pytest.fixture(scope="module")
def paused_run():
    build_parser()  # imports every subcommand's module now, not while the job's first steps run
    pauser = Pauser()
    run = run_training(HA, env={"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN}, on_line=pauser)
    if pauser.thread is not None:
        pauser.thread.join(130)
    return run, pauser


def test_the_paused_run_ends_as_the_uninterrupted_one(paused_run, reference_runs):
    run, pauser = paused_run
    run.require_success()
    reference, _ = reference_runs("ha")
    assert run.digest == reference.digest
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))


def test_every_rank_held_after_step_5_for_the_hold_then_training_went_on(paused_run):
    run, pauser = paused_run
    assert pauser.code == 0, (pauser.code, pauser.printed)
    assert "pause asked for after step 5" in pauser.printed
    assert "paused: every rank holds" in pauser.printed
    assert "training paused after step 5: all 4 ranks hold before their next update" in run.output
    held = {int(rank): int(ms) for rank, ms in
            re.findall(r"\[processor rank (\d+)\] held for (\d+) ms after step 5; training goes on", run.output)}
    assert sorted(held) == [0, 1, 2, 3]
    assert all(ms >= HOLD_S * 1000 - 500 for ms in held.values()), held
    assert re.search(r"training continues after step 5: its hold limit was reached \(held 3\.\d+ s\)", run.output)


def test_a_pause_is_no_fault_and_starts_no_recovery(paused_run):
    run, _ = paused_run
    for sign in ("fault on rank", "decision ", "ABNORMAL", "FORCE STOP", "hang:"):
        assert sign not in run.output, sign
