"""Two nodes as a user runs them, at the defaults the rest of the suite changes (docs/testing.md): two
`mindio-adaptor launch` processes, each starting its workers as new interpreters (no --fork-workers), torch.compile
on with an empty cache, the slow-rank rule at its default windows (10 steps, 3 in a row) and sub-health policy
(`ignore`: a warning), and Ctrl-C to end it.

One run: rank 3 is slowed from step 2 on (a sleep per step); the controller warns that rank 3, and no other, is
slow, and decides nothing. Once it did, and one more step was logged, each node gets the SIGINT its terminal would
send its launcher's process group: both launchers stop their workers and exit 130 within 30 s, no worker is
started again, nothing is left behind."""
import os
import re
import signal
import threading
import time

import pytest

from mindio_adaptor.tiny.job import LocalCluster

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
SLOW = re.compile(r"rank (\d+) is slow: steps (\d+)-(\d+): compute \d+ ms per step against the ranks' median of \d+ "
                  r"ms \((\d+) windows of (\d+) steps in a row over ([\d.]+)x\)")
STEP = re.compile(r"\] iteration\s+(\d+)/")
INTERRUPT_BOUND_S = 30.0  # from the SIGINT to both launchers' exit (each kills its workers 30 s after passing it)


class SlowThenCtrlC:
    """Sees every line: the slow-rank warnings, then the first step logged after the first of them."""

    def __init__(self):
        self.slow_ranks, self.verdicts, self.step_after = [], [], threading.Event()
        self.steps_at_warning = None
        self.last_step = 0

    def __call__(self, line):
        step = STEP.search(line)
        if step:
            self.last_step = int(step.group(1))
            if self.steps_at_warning is not None and self.last_step > self.steps_at_warning:
                self.step_after.set()
        slow = SLOW.search(line)
        if slow:
            self.slow_ranks.append(int(slow.group(1)))
            self.verdicts.append(slow.groups()[1:])
            if self.steps_at_warning is None:
                self.steps_at_warning = self.last_step


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    watch = SlowThenCtrlC()
    cache = tmp_path_factory.mktemp("inductor-cache")
    env = {"TORCH_COMPILE_DISABLE": "0", "PET_FORK_WORKERS": "0", "TORCHINDUCTOR_CACHE_DIR": str(cache),
           "MINDIO_FAULT_INJECT": "slow:rank=3,step=2,seconds=0.25",
           "MINDIO_FAULT_STATE_DIR": str(tmp_path_factory.mktemp("faults"))}
    cluster = LocalCluster(FLAGS, train_iters=500, env=env, on_line=watch)
    launchers = [cluster.start_node("--node-rank", str(node)) for node in (0, 1)]
    cluster.wait_for(watch.step_after, "a step after the slow-rank warning", timeout=400)
    pressed = time.monotonic()
    for launcher in launchers:
        os.killpg(launcher.pid, signal.SIGINT)
    run = cluster.wait(timeout=120)
    codes = [launcher.wait() for launcher in launchers]
    return run, codes, time.monotonic() - pressed, watch, sorted(p.name for p in cache.iterdir())


def test_the_slow_rank_is_found_at_the_default_windows_and_only_warned_of(interrupted):
    run, _, _, watch, _ = interrupted
    assert watch.slow_ranks == [3], watch.slow_ranks
    # slow from step 2 on: the windows of steps 1-10, 11-20 and 21-30 each had it slow (the defaults: 3 windows of
    # 10 steps, over 1.5x the ranks' median), so the third one's end names it
    assert watch.verdicts == [("21", "30", "3", "10", "1.5")], watch.verdicts
    assert "decision " not in run.output
    assert "hot switch" not in run.output.lower()


def test_ctrl_c_ends_both_nodes_and_every_worker(interrupted):
    run, codes, ending_s, *_ = interrupted
    assert codes == [130, 130], codes
    assert ending_s < INTERRUPT_BOUND_S, ending_s
    for node in (0, 1):
        assert re.search(rf"node {node}\] received SIGINT: passing it to the workers", run.output)
        assert re.search(rf"node {node}\] summary: stopped by SIGINT; exit code 130; group restarts 0; restarts per "
                         rf"rank: rank \d: 0, rank \d: 0", run.output)
    assert "started again" not in run.output
    assert not run.leftover


def test_its_workers_were_new_interpreters_that_compiled(interrupted):
    run, *_, compiled = interrupted
    assert compiled, "torch.compile wrote nothing into the empty cache"
    assert "workers are forked" not in run.output
    assert re.search(r"generation 0: started ranks \[0, 1\]", run.output)
    assert re.search(r"generation 0: started ranks \[2, 3\]", run.output)
