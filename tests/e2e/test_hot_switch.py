"""Hot switch on the real megatron.training (dp4, R=2, 4 gloo processes) under `mindio-adaptor launch` with a warm
spare: `mindio-adaptor drain --rank 1 --after-step 5` against the controller's status server moves rank 1 to a
new process while the job runs. Every rank holds after step 5; the old process of rank 1 exits 0; the launcher
hands the rank to its warm spare; the new process gets rank 1's shard from its replica peer; training goes on
at step 6. The run ends with the uninterrupted run's digest and losses, each step's loss line once (no step
recomputed), and nothing is counted as a fault. One run, checked several ways.

A run with rank 2 slowed on purpose (a sleep per step) under subHealthyStrategy hotSwitch: rank 2 is found slow, the
policy asks for its hot switch, and it moves (the new process is as slow, the sleep being the "device"'s: its
next report within the quiet time is only said). Its new process is killed (SIGKILL, from here) once it
registered: the controller waits for the next one, which the launcher starts as for any lost process, and the
job goes on as from a lost rank, to the same digest. The switched run above, not slowed and judged by the same
windows, reports no rank slow.

A run of two launchers as two nodes and a standby launcher drains node 1 (`drain --node`): both its ranks are
handed over, node 1's launcher leaves the job to the standby, whose warm workers become ranks 2 and 3, with no
step lost. Right after the switch rank 0, the other holder of rank 2's shard, is SIGKILLed (from here), before the
new processes' first update ends: they hold the switched step's state, and rank 0 is replaced from rank 2."""
import contextlib
import io
import os
import re
import signal
import socket
import threading

import pytest

from mindio_adaptor.cli import build_parser, main as cli_main
from mindio_adaptor.tiny.job import LocalCluster, kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
SLOW_RULES = {"MINDIO_SLOW_WINDOW_STEPS": "1", "MINDIO_SLOW_WINDOWS": "3"}
SLOW = re.compile(r"rank (\d+) is slow: steps")
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1", "--spare-workers", "1")
TOKEN = "hot-switch-e2e-token-0123456789abcdef"
FIRST_STEPS = re.compile(r"iteration\s+2/")
STEP = re.compile(r"\] iteration\s+(\d+)/")
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


class NewProcessKiller:
    """SIGKILL to rank R's new process once it says it took the rank for a hot switch (it registered)."""
    NEW_PROCESS = re.compile(r"handed its rank over \(hot switch\); its new process is pid (\d+)")

    def __init__(self, rank):
        self.rank, self.new_pid, self.killed = rank, None, None

    def __call__(self, line):
        m = self.NEW_PROCESS.search(line)
        if m and f"] rank {self.rank} (local rank" in line:
            self.new_pid = int(m.group(1))
        if self.killed is None and self.new_pid and f"INFO warm spare: took rank {self.rank} for a hot switch" in line:
            self.killed = self.new_pid
            os.kill(self.new_pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def switched_run():
    build_parser()  # imports every subcommand's module now, not while the job's first steps run
    drainer = Drainer()
    run = run_training(FLAGS, launcher=LAUNCH, on_line=drainer,
                       env={"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN, **SLOW_RULES})
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


def test_a_hot_switch_is_no_fault_and_no_rank_of_the_unslowed_run_is_slow(switched_run):
    run, _ = switched_run
    assert not SLOW.findall(run.output)
    assert "fault on rank" not in run.output
    assert "decision " not in run.output
    assert "restart 1 of 1" not in run.output  # not counted against --max-restarts


@pytest.fixture(scope="module")
def slow_rank_switched(tmp_path_factory):
    env = {"MINDIO_SUB_HEALTHY_STRATEGY": "hotSwitch", "MINDIO_FAULT_INJECT": "slow:rank=2,step=1,seconds=0.3",
           "MINDIO_FAULT_STATE_DIR": str(tmp_path_factory.mktemp("slow_faults")), **SLOW_RULES}
    killer = NewProcessKiller(2)
    return run_training(FLAGS, launcher=LAUNCH, env=env, on_line=killer), killer


def test_a_slow_rank_is_hot_switched_by_policy(slow_rank_switched, reference_runs):
    run = slow_rank_switched[0].require_success()
    assert set(SLOW.findall(run.output)) == {"2"}, SLOW.findall(run.output)
    assert "sub-health policy: rank 2 MINDIO-SLOW -> SubHealthFault -> hot switch: asked for" in run.output
    switched = re.search(r"ranks \[2\] switched to new processes, training resumes at step (\d+)", run.output)
    assert switched and int(switched.group(1)) <= 6, run.output[-4000:]
    assert "decision " not in run.output
    reference, _ = reference_runs("ha")
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    assert run.losses == reference.losses
    assert run.digest == reference.digest


class NodeDrainer(Drainer):
    """`mindio-adaptor drain --node <host>/node1 --after-step 5` to the leading controller's status page (node 1
    hosts a backup controller with a page of its own), once the standby watches the nodes."""
    NODE = f"{socket.gethostname()}/node1"

    def __init__(self):
        super().__init__()
        self.ports, self.standby_watching, self.asked_at = [], False, None

    def __call__(self, line):
        self.standby_watching = self.standby_watching or "standby: watching nodes [1]" in line
        m = STATUS_PAGE.search(line)
        if m:
            self.ports.append(int(m.group(1)))
        step = STEP.search(line)
        if self.thread is None and len(self.ports) == 2 and self.standby_watching and step:
            self.asked_at = int(step.group(1))
            self.thread = threading.Thread(target=self._drain, daemon=True)
            self.thread.start()

    def _leader(self):
        from mindio_adaptor.cli.status_client import request_json

        for port in self.ports:
            if request_json(f"127.0.0.1:{port}", TOKEN, "/status.json")["term"] >= 1:
                return port
        return self.ports[0]

    def _drain(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                self.code = cli_main(["drain", "--controller", f"127.0.0.1:{self._leader()}", "--token", TOKEN,
                                      "--node", self.NODE, "--after-step", "5", "--wait", "120"])
            except SystemExit as err:
                self.code = err.code
            except Exception as err:  # noqa: BLE001 - the test names it
                self.code = f"{type(err).__name__}: {err}"
        self.printed = out.getvalue()


class KillAfterTheSwitch:
    """SIGKILL to rank R's process as soon as the controller says the switched ranks' new processes train."""
    SWITCHED = "switched to new processes, training resumes at step"

    def __init__(self, rank):
        self.rank, self.pid, self.killed = rank, None, None
        self.started = re.compile(rf"\brank {rank} pid (\d+) starting")

    def __call__(self, line):
        m = self.started.search(line)
        if m:
            self.pid = int(m.group(1))
        if self.killed is None and self.pid and self.SWITCHED in line:
            self.killed = self.pid
            os.kill(self.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def node_drained():
    build_parser()
    drainer, killer = NodeDrainer(), KillAfterTheSwitch(0)

    def on_line(line):
        drainer(line)
        killer(line)

    cluster = LocalCluster(FLAGS, env={"MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN}, on_line=on_line)
    cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    cluster.start_node("--standby")
    run = cluster.wait()
    if drainer.thread is not None:
        drainer.thread.join(130)
    return run, drainer, node_1, killer


def test_a_drained_node_is_left_to_the_standby_with_no_step_lost(node_drained, reference_runs):
    run, drainer, node_1, _ = node_drained
    run.require_success()
    assert drainer.asked_at is not None and drainer.asked_at <= 4, drainer.asked_at  # so "after step 5" can hold
    assert drainer.code == 0, (drainer.code, drainer.printed, run.output[-4000:])
    assert "hot switch of ranks [2, 3] asked for after step 5" in drainer.printed
    assert "node 1: every local rank [2, 3] was handed over (hot switch) and a standby launcher waits: this node " \
           "leaves the job to it (drain)" in run.output
    for rank in (2, 3):
        assert re.search(rf"rank {rank}: its old process \(pid \d+\) ended after handing its rank over: exit code 0",
                         run.output)
    assert re.search(r"node 1 was lost: this launcher takes its place in the running job .*because its launcher "
                     r"handed it over \(every local rank was switched to a standby: a drain\)", run.output)
    assert "ranks [2,3] switched to new processes, training resumes at step 5" in run.output
    for rank in (2, 3):  # the standby's warm workers, started as a hot switch's new processes
        assert re.search(rf"rank {rank}\] INFO warm spare: took rank {rank} for a hot switch", run.output)
    assert node_1.returncode == 0
    seen = process_ids(run.output)
    assert kept_one_process(seen, 1), seen
    reference, _ = reference_runs("ha")
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_its_new_process_lost_while_joining_is_replaced_as_a_lost_ranks(slow_rank_switched):
    run, killer = slow_rank_switched
    assert killer.killed, run.output[-3000:]
    assert re.search(r"the new process of rank 2 was lost while joining \(.*\); waiting for another", run.output)
    assert re.search(rf"rank 2 \(local rank 2, pid {killer.killed}\) ended: signal SIGKILL; worker reboot: rank 2 "
                     rf"started again alone as pid \d+", run.output)
    seen = process_ids(run.output)
    assert len(set(seen[2]["starting"])) == 3, seen  # the slow one, the killed one, the one that finished
    for rank in (0, 1, 3):
        assert kept_one_process(seen, rank), seen


def test_the_shard_peer_lost_right_after_the_switch_is_replaced_from_the_new_process(node_drained):
    run, _, _, killer = node_drained
    assert killer.killed, run.output[-3000:]
    assert re.search(r"decision recover: faults [^\n]*\b0:node", run.output), run.output[-4000:]
    assert re.search(r"rank 0\] INFO repair of step \d+: received my optimizer shard .* from rank 2", run.output)
    assert "ranks [0] replaced, training resumes at step" in run.output
    seen = process_ids(run.output)
    assert killer.killed in seen[0]["starting"] and len(set(seen[0]["starting"])) == 2, seen
