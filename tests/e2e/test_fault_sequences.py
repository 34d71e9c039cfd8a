"""Faults in sequence, on the real megatron.training (dp4, R=2, gloo, online repair and worker reboot): two
`mindio-adaptor launch` processes play two nodes of two ranks each and host the controllers (node 0's
active, node 1's a backup). The chaos soak of issue 30 found this sequence ending the job:

node 1 lost (its launcher and workers SIGKILLed) and a new launcher of node 1 started 3 s later; after the
recovery node 0 lost and replaced the same way; after that recovery a rank of node 1 SIGKILLed.

The rank's replacement was started alone by node 1's second launcher, which had built its workers'
environment when it started: the store and controller of the first node 0, dead since the second fault,
and MINDIO_REHOSTED_SLOT (that launcher had re-hosted slot 1), which made the not-yet-registered process
skip node 1's store, the only one that answered. It died at once, 50 times. Now every process a launcher
starts gets the job's current lists, read from the launchers' store at its start, and the slot only until
the members adopted it (launch/membership). On the code before that, both sequences here ended in group
restarts whose workers could not register (a dead controller, a backup leading nothing) and never finished.

The sequence and its mirror (node 0 replaced, then node 1, then a rank of node 0 killed) each end
bit-identical to the uninterrupted run, every launcher exiting 0. Each fault comes once the previous
recovery trained a step."""
import os
import re
import signal
import threading
import time

import pytest

from mindio_adaptor.tiny.job import LocalCluster

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-hbmfault-repair", "--enable-worker-reboot"]
LAUNCH_FLAGS = ["--controllers", "2", "--node-lost-after", "3"]
ENV = {"MINDIO_TAKEOVER_WAIT_S": "3"}  # a lost node's ranks are judged lost well before its new launcher's register
REPLACEMENT_AFTER_S = 3.0  # a rescheduled node's launcher comes back this long after the loss, as in the soak
STEP_LOGGED = re.compile(r"iteration\s+(\d+)/")
RESUMED = re.compile(r"ranks \[[\d,]+\] replaced, training resumes at step (\d+)")
STARTED = re.compile(r"node (\d)\] generation \d+: started ranks \[([\d, ]+)\] as pids \[([\d, ]+)\]")


class Story:
    """What the launchers printed so far, as far as the faults wait on it: the steps logged, the recoveries
    ended, the pids each node's last launcher started."""

    def __init__(self):
        self.changed = threading.Condition()
        self.events = []  # ("step", n) or ("resumed", n), in the order printed
        self.pids = {}  # rank -> pid, from the last "started ranks" line of its node

    def __call__(self, line):
        with self.changed:
            for pattern, kind in ((STEP_LOGGED, "step"), (RESUMED, "resumed")):
                match = pattern.search(line)
                if match:
                    self.events.append((kind, int(match.group(1))))
            started = STARTED.search(line)
            if started:
                ranks, pids = (map(int, group.split(", ")) for group in started.group(2, 3))
                self.pids.update(zip(ranks, pids))
            self.changed.notify_all()

    def recovered(self, count):
        """Whether the count-th recovery ended and a step was logged after it."""
        resumed = [i for i, (kind, _) in enumerate(self.events) if kind == "resumed"]
        return len(resumed) >= count and any(kind == "step" for kind, _ in self.events[resumed[count - 1]:])

    def wait(self, cluster, done, what, timeout=300):
        with self.changed:
            if self.changed.wait_for(done, timeout):
                return
        cluster.kill()
        raise AssertionError(f"{what} never logged:\n" + "".join(cluster.lines)[-8000:])


def replace_node(cluster, launchers, node):
    cluster.lose_node(launchers[node])
    time.sleep(REPLACEMENT_AFTER_S)
    launchers[node] = cluster.start_node("--node-rank", str(node))


def play(first, second, rank_killed, out):
    story = Story()
    cluster = LocalCluster(FLAGS, env=ENV, launch_flags=LAUNCH_FLAGS, on_line=story)
    launchers = {node: cluster.start_node("--node-rank", str(node)) for node in (0, 1)}
    story.wait(cluster, lambda: ("step", 2) in story.events, "step 2")
    replace_node(cluster, launchers, first)
    story.wait(cluster, lambda: story.recovered(1), f"a step after node {first}'s replacement")
    replace_node(cluster, launchers, second)
    story.wait(cluster, lambda: story.recovered(2), f"a step after node {second}'s replacement")
    killed = story.pids[rank_killed]
    os.kill(killed, signal.SIGKILL)  # the worker process alone, not its node
    try:
        run = cluster.wait(timeout=500)
    finally:  # the whole story, for a failure
        (out / "output.log").write_text("".join(cluster.lines))
    codes = [proc.returncode for proc in cluster.launchers if proc not in cluster.lost]
    return run, codes, killed


@pytest.fixture(scope="module")
def node_1_then_node_0_then_rank_2(tmp_path_factory):
    return play(first=1, second=0, rank_killed=2, out=tmp_path_factory.mktemp("node_1_then_node_0_then_rank_2"))


@pytest.fixture(scope="module")
def node_0_then_node_1_then_rank_0(tmp_path_factory):
    return play(first=0, second=1, rank_killed=0, out=tmp_path_factory.mktemp("node_0_then_node_1_then_rank_0"))


def check_ended_like_the_uninterrupted_run(played, reference_runs, rank_killed):
    run, codes, killed = played
    assert codes == [0, 0], (codes, run.output[-8000:])
    run.require_success()
    assert len(RESUMED.findall(run.output)) == 3, run.output[-8000:]
    assert re.search(rf"rank {rank_killed} \(local rank \d, pid {killed}\) ended: signal SIGKILL; worker reboot",
                     run.output), run.output[-8000:]
    # its one replacement joined: no start that died on a dead address and was started again
    assert re.search(rf"summary: .*restarts per rank: .*rank {rank_killed}: 1\b", run.output), run.output[-8000:]
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_node_1_replaced_then_node_0_then_a_rank_of_node_1_killed(node_1_then_node_0_then_rank_2, reference_runs):
    check_ended_like_the_uninterrupted_run(node_1_then_node_0_then_rank_2, reference_runs, rank_killed=2)


def test_node_0_replaced_then_node_1_then_a_rank_of_node_0_killed(node_0_then_node_1_then_rank_0, reference_runs):
    check_ended_like_the_uninterrupted_run(node_0_then_node_1_then_rank_0, reference_runs, rank_killed=0)
