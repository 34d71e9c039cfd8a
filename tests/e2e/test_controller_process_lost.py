"""The recovery controller's own process lost, on the real megatron.training (dp4, R=2, gloo,
--enable-worker-reboot): four `mindio-adaptor launch` processes play four nodes of one rank each, and the
first three host the controllers (`--controllers 3`: node 0's is active, node 1's and node 2's are backups).
The active controller's process is SIGKILLed after step 3 while training is healthy: the processors
register with the first backup, which takes over as term 2, and training never stops. Rank 2 is then
killed in step 5, and the controller leading its recovery (term 2) is SIGKILLed as soon as it has decided
it: the second backup takes over as term 3 in the middle of the recovery, handles the faults again and
leads rank 2's replacement. The run ends bit-identical to the uninterrupted one with only rank 2's
process changed. Each launcher whose controller died says so and does not start it again."""
import re
import signal
import threading

import psutil
import pytest

from mindio_adaptor.tiny.job import LocalCluster, kept_one_process, process_ids

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
STEP_3 = re.compile(r"iteration\s+3/")
DECIDED = re.compile(r"\] decision recover")


def controller_of(launcher):
    (proc,) = [p for p in psutil.Process(launcher.pid).children() if "controller" in p.cmdline()]
    return proc


@pytest.fixture(scope="module")
def controller_lost(tmp_path_factory):
    step_3, deciding = threading.Event(), threading.Event()

    def on_line(line):
        if STEP_3.search(line):
            step_3.set()
        if DECIDED.search(line):
            deciding.set()

    env = {"MINDIO_FAULT_INJECT": "kill:rank=2,step=5",
           "MINDIO_FAULT_STATE_DIR": str(tmp_path_factory.mktemp("faults"))}
    cluster = LocalCluster(FLAGS, nnodes=4, nproc_per_node=1, env=env, launch_flags=["--controllers", "3"],
                           on_line=on_line)
    nodes = [cluster.start_node("--node-rank", str(node)) for node in range(4)]
    killed = []
    for event, node, what in ((step_3, 0, "step 3"), (deciding, 1, "term 2's decision")):
        cluster.wait_for(event, what)
        controller = controller_of(nodes[node])
        controller.send_signal(signal.SIGKILL)
        killed.append(controller.pid)
    return cluster.wait(), killed


def test_training_goes_on_under_the_backup_and_ends_bit_identical(controller_lost, reference_runs):
    run, _ = controller_lost
    run.require_success()
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # each step's line once
    assert run.digest == reference.digest


def test_the_backups_took_over_in_turn_and_the_second_finished_the_recovery(controller_lost):
    run, _ = controller_lost
    assert re.search(r"backup controller taking over as term 2", run.output), run.output[-6000:]
    assert re.search(r"registered with the controller at 127\.0\.0\.1:\d+ \(term 2\)", run.output)
    assert re.search(r"decision recover: faults [^\n]*\b2:node", run.output)
    term_3 = run.output.index("backup controller taking over as term 3")
    # Killed after deciding, term 2 may or may not have sent a stop: term 3 restarts the interrupted recovery
    # or meets the faults afresh, and decides again either way.
    assert re.search(r"decision recover: faults [^\n]*\b2:node", run.output[term_3:])
    assert "ranks [2] replaced, training resumes at step" in run.output[term_3:]


def test_a_stop_under_a_backup_keeps_the_rank_connected_to_it(controller_lost):
    """A stop shuts down the gloo connections, and before the fix also a rank's connection to a backup that
    led the job (only the first controller's port was kept): the stop's replies were lost and the
    recovery waited out the action time limit."""
    run, _ = controller_lost
    controllers = {int(port) for port in re.findall(r"registered with the controller at 127\.0\.0\.1:(\d+)",
                                                    run.output)}
    assert len(controllers) == 3, controllers  # terms 1, 2 and 3
    stops = re.findall(r"stopped: shut down \d+ gloo connection\(s\), kept ports \[([\d, ]+)\]", run.output)
    assert stops and all(controllers <= {int(port) for port in ports.split(",")} for ports in stops), stops


def test_only_rank_2s_process_changed_and_no_dead_controller_was_started_again(controller_lost):
    run, killed = controller_lost
    for node, pid in enumerate(killed):
        assert re.search(rf"node {node}\] this node's controller \(pid {pid}\) ended: signal SIGKILL; the "
                         rf"processors follow the next of the list; it is not started again", run.output)
    seen = process_ids(run.output)
    for rank in (0, 1, 3):  # the controllers' loss touched no training process
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[2]["starting"])) == 2, seen
