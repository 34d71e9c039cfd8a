"""Sub-health on the real megatron.training (dp4, R=2, 4 gloo processes, online repair on): pause and continue,
the slow-rank signal and the goodput ledger. Rank 3 is slowed from step 1 on (a sleep in each forward); a
memory error injected in step 2 is repaired online; then `mindio-adaptor pause` against the in-job
controller's status server holds every rank after step 5 for 3 s. The run ends with the uninterrupted run's
digest and losses; the pause started no recovery; rank 3 alone is reported slow (not the peers that wait for
it); the controller's ledger at the end puts the wall time in its uses, adding up within 1 %, with the 3 s
paused and the repair's time. One run, checked several ways. A second run: rank 0 hangs before a pause's hold, and
the hang rule finds it while the pause waits."""
import contextlib
import io
import re
import threading

import pytest

from mindio_adaptor.cli import build_parser, main as cli_main
from mindio_adaptor.tiny.job import STATUS_PAGE, controller_said_at, run_training

pytestmark = pytest.mark.e2e
REPAIR = ["--enable-high-availability", "--enable-hbmfault-repair"]
TOKEN = "pause-e2e-token-0123456789abcdef"
HOLD_S = 3.0


class Pauser:
    """Once the status page's port is printed and a line matching `when` came (by default: the online repair
    finished), runs `mindio-adaptor pause --after-step AFTER_STEP` (its main, in this process: a new interpreter
    takes longer to start than the tiny job's next steps). A pause asked for before the repair would be given up: a
    fault's recovery ends it."""

    def __init__(self, when: str = "online repair finished", after_step: int = 5):
        self.when, self.after_step = re.compile(when), after_step
        self.port, self.thread, self.code, self.printed = None, None, None, ""

    def __call__(self, line):
        m = STATUS_PAGE.search(line)
        if m:
            self.port = int(m.group(1))
        if self.thread is None and self.port and self.when.search(line):
            self.thread = threading.Thread(target=self._pause, daemon=True)
            self.thread.start()

    def _pause(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                self.code = cli_main(["pause", "--controller", f"127.0.0.1:{self.port}", "--token", TOKEN,
                                      "--after-step", str(self.after_step), "--hold", str(HOLD_S), "--wait", "60"])
            except SystemExit as err:
                self.code = err.code
        self.printed = out.getvalue()


@pytest.fixture(scope="module")
def paused_run(tmp_path_factory):
    build_parser()  # imports every subcommand's module now, not while the job's first steps run
    pauser = Pauser()
    faults = tmp_path_factory.mktemp("pause") / "faults"
    run = run_training(REPAIR, on_line=pauser, env={
        "MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN, "MINDIO_FAULT_STATE_DIR": str(faults),
        "MINDIO_FAULT_INJECT": "raise:rank=1,step=2,msg=UCE ERROR injected before the pause;"
                               "slow:rank=3,step=1,seconds=0.3",
        "MINDIO_SLOW_WINDOW_STEPS": "2", "MINDIO_SLOW_WINDOWS": "2"})
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


def test_the_pause_started_no_recovery(paused_run):
    run, _ = paused_run
    assert run.output.count("[controller rank 0] decision ") == 1  # the injected memory error's online repair
    during = run.output[run.output.index("pause asked for: after step 5"):run.output.index("training continues after")]
    for sign in ("fault on rank", "decision ", "ABNORMAL", "FORCE STOP", "hang:"):
        assert sign not in during, sign


_LEDGER = re.compile(r"controller at exit: goodput ([\d.]+) of ([\d.]+) s: (.*?)(?:; recovery|$)", re.M)
def _at(says: str, output: str) -> float:
    said = controller_said_at(output, says)
    assert said is not None, f"no controller line {says!r}"
    return said


def test_the_goodput_ledger_adds_up_to_the_wall_time_with_the_pause_and_the_repair_in_it(paused_run):
    run, _ = paused_run
    ratio, wall, uses_text = _LEDGER.search(run.output).groups()
    uses = {name: float(seconds) for name, seconds in re.findall(r"([a-z-]+) ([\d.]+) s", uses_text)}
    assert abs(sum(uses.values()) - float(wall)) <= 0.01 * float(wall), (wall, uses)
    # the wall time is the controller's, from its start to the job's end, as its own log lines say
    lived = _at(r"rank \d+ finished training", run.output) - _at("listening on", run.output)
    # (a loaded machine delays a log line, and the resume after the hold, by tenths of a second to seconds)
    assert abs(float(wall) - lived) <= 0.01 * lived + 0.5, (wall, lived)
    assert HOLD_S - 0.1 <= uses["paused"] <= HOLD_S + 3.0, uses
    assert uses["recovering"] > 0 and uses["recomputed"] > 0 and uses["productive"] > 0 and uses["start-up"] > 0
    # each figure is printed rounded to 2 decimals, the ratio from the unrounded ones (seen: 0.44 of 6.62 / 15.22)
    assert abs(float(ratio) - uses["productive"] / float(wall)) <= 0.006, (ratio, uses, wall)
    assert re.search(r"; recovery #1: .*ABNORMAL [\d.]+ s.*, recomputed [\d.]+ s$", run.output, re.M)


def test_the_slowed_rank_alone_is_reported_slow(paused_run):
    run, _ = paused_run
    slow = re.findall(r"\[controller rank 0\] rank (\d+) is slow: steps (\d+)-(\d+): compute (\d+) ms per step "
                      r"against the ranks' median of (\d+) ms \(2 windows of 2 steps in a row over 1.5x\)", run.output)
    assert [rank for rank, *_ in slow] == ["3"], slow  # once, and none of the peers that wait for it
    _, first, last, compute, median = map(int, slow[0])
    # two sleeps of 0.3 s per step (two micro-batches); a loaded machine stretches the median too (seen: 704 ms
    # against 319 under two test workers), so the sleeps show as the rule's own 1.5x and as most of their 0.6 s
    assert last <= 6 and compute >= 1.5 * median and compute >= 500, slow


def test_a_rank_that_hangs_before_the_pause_holds_is_found_by_the_hang_rule_meanwhile(tmp_path):
    """The pause waits for every rank to hold; rank 0 hangs first. The hang rule runs during that wait: the hang
    is a fault within its limit (12 s), the pause is given up for it, and the job ends in the dump of step 3. (The
    wait once ran to its whole action timeout, 180 s, before the hang was looked at.)"""
    build_parser()
    pauser = Pauser(when=r"iteration\s+2/", after_step=3)  # rank 0 hangs in step 4's forward, before the hold
    run = run_training([*REPAIR, "--save", str(tmp_path / "ckpt"), "--save-interval", "1000"], on_line=pauser, env={
        "MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults"),
        "MINDIO_FAULT_INJECT": "hang:rank=0,step=4,phase=forward"})
    if pauser.thread is not None:
        pauser.thread.join(130)
    out = run.output
    asked = _at("pause asked for: after step 3", out)
    hang = _at(r"hang: rank \d's step has run \d+ ms, past its limit of 12000 ms[^\n]*furthest behind: \[0\]", out)
    assert 10 <= hang - asked <= 60, (hang - asked, out[-4000:])
    assert "the pause after step 3 is given up: a fault came first" in out, out[-4000:]
    assert re.search(r"dump of step 3 published", out), out[-4000:]
    assert run.returncode != 0
