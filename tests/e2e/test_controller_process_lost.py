"""The recovery controller's own process lost, on the real megatron.training (dp4, R=2, gloo,
--enable-worker-reboot): two `mindio-adaptor launch` processes play two nodes of two ranks each and host
the controllers (`--controllers 2`: node 0's is active, node 1's a backup). The active controller's
process is SIGKILLed after step 3 while training is healthy: the processors register with the backup,
which takes over as term 2, and training never stops. Rank 2 is then killed in step 5: the backup leads
its replacement, and the run ends bit-identical to the uninterrupted one with only rank 2's process
changed. Node 0's launcher says its controller ended and does not start it again."""
import re
import signal
import threading

import psutil
import pytest

from mindio_adaptor.tiny_job import LocalCluster, process_ids

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
STEP_3 = re.compile(r"iteration\s+3/")


def controller_of(launcher):
    (proc,) = [p for p in psutil.Process(launcher.pid).children() if "controller" in p.cmdline()]
    return proc


@pytest.fixture(scope="module")
def controller_lost(tmp_path_factory):
    step_3 = threading.Event()
    env = {"MINDIO_FAULT_INJECT": "kill:rank=2,step=5",
           "MINDIO_FAULT_STATE_DIR": str(tmp_path_factory.mktemp("faults"))}
    cluster = LocalCluster(FLAGS, env=env, launch_flags=["--controllers", "2"],
                           on_line=lambda line: STEP_3.search(line) and step_3.set())
    node_0 = cluster.start_node("--node-rank", "0")
    cluster.start_node("--node-rank", "1")
    if not step_3.wait(300):
        cluster.kill()
        raise AssertionError("step 3 never logged:\n" + "".join(cluster.lines)[-6000:])
    active = controller_of(node_0)
    active.send_signal(signal.SIGKILL)
    return cluster.wait(), active.pid


def test_training_goes_on_under_the_backup_and_ends_bit_identical(controller_lost, reference_runs):
    run, _ = controller_lost
    run.require_success()
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_the_backup_took_over_and_led_the_replacement(controller_lost):
    run, killed = controller_lost
    assert re.search(r"backup controller taking over as term 2", run.output), run.output[-6000:]
    assert re.search(r"registered with the controller at 127\.0\.0\.1:\d+ \(term 2\)", run.output)
    assert re.search(r"decision recover: faults [^\n]*\b2:node", run.output)
    assert "ranks [2] replaced, training resumes at step" in run.output
    assert re.search(rf"node 0\] this node's controller \(pid {killed}\) ended: signal SIGKILL; the processors "
                     rf"follow the next of the list; it is not started again", run.output)
    seen = process_ids(run.output)
    for rank in (0, 1, 3):  # the controller's loss touched no training process
        assert len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"], seen
    assert len(set(seen[2]["starting"])) == 2, seen
