"""A whole node lost, on the real megatron.training (dp4, R=2, gloo, --enable-worker-reboot): two
`mindio-adaptor launch` processes play two nodes of two ranks each, and a shard's two holders sit on
different nodes. Losing a node is SIGKILLing every process of it (its launcher and both workers).

One run loses node 1 twice: after step 3 a standby launcher already waiting takes its place (nothing is
started by the test), after step 6 a new launcher started with node rank 1 does (what a rescheduled pod or
a requeued Slurm step does). Each time the new node's workers join the running job and receive their
shards from node 0's ranks, and the run ends bit-identical to the uninterrupted one while node 0's
processes never change. Another run loses node 1 with no replacement: the survivors write the dying-gasp
checkpoint once the controller stops waiting, and its resume ends bit-identical."""
import re
import threading

import pytest

from mindio_adaptor.tiny.job import LocalCluster, kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
LOST_AFTER = ["--node-lost-after", "3"]
STEP_LOGGED = re.compile(r"iteration\s+(\d+)/")
# How long the controller waits for a lost rank's replacement before the dump: nothing can come in that test
# (no standby, no new launcher), so a short wait, as tests/e2e/test_elastic_scale_in.py's 5 s, only saves time.
ARF_WAIT_S = "5"


class StepWatch:
    """Events set when Megatron's log line of a step first appears (printed by the last rank, on node 1)."""

    def __init__(self, *steps):
        self.events = {step: threading.Event() for step in steps}

    def __call__(self, line):
        match = STEP_LOGGED.search(line)
        if match and int(match.group(1)) in self.events:
            self.events[int(match.group(1))].set()

    def wait(self, step, cluster):
        cluster.wait_for(self.events[step], f"step {step}")


@pytest.fixture(scope="module")
def node_1_lost_twice():
    """Node 1 lost after step 3 (a standby takes over) and after step 6 (a new launcher does). Every launcher
    starts its workers as a user's does, each a new interpreter (the other LocalCluster runs fork them from a
    template: docs/testing.md)."""
    steps = StepWatch(3, 6)
    cluster = LocalCluster(FLAGS, launch_flags=LOST_AFTER, on_line=steps, env={"PET_FORK_WORKERS": "0"})
    cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    standby = cluster.start_node("--standby")
    steps.wait(3, cluster)
    lost = cluster.lose_node(node_1)
    steps.wait(6, cluster)
    lost += cluster.lose_node(standby)  # node 1 now
    cluster.start_node("--node-rank", "1")
    return cluster.wait(), lost


def test_node_1_lost_twice_and_replaced_ends_bit_identical(node_1_lost_twice, reference_runs):
    run, _ = node_1_lost_twice
    run.require_success()
    assert "workers are forked" not in run.output
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # each step's line once
    assert run.digest == reference.digest


def test_only_the_lost_nodes_processes_change(node_1_lost_twice):
    run, lost = node_1_lost_twice
    seen = process_ids(run.output)
    for rank in (0, 1):  # node 0: one process from start to end
        assert kept_one_process(seen, rank), seen
    for rank in (2, 3):  # node 1: two processes lost, the third finished the run
        *gone, last = seen[rank]["starting"]
        assert len(gone) == 2 and set(gone) <= set(lost) and seen[rank]["done"] == [last], (seen, lost)


def test_the_new_nodes_are_named_and_repaired_from_node_0(node_1_lost_twice):
    run, _ = node_1_lost_twice
    assert re.search(r"standby\] standby: watching nodes \[1\]", run.output)
    # the standby's workers had run the script ahead as stand-in rank 1 (Megatron initialised on the fake
    # backend, the model built) before node 1 was lost, and each took its rank
    assert re.search(r"node 1\] generation 0: started ranks \[2, 3\] as pids \[\d+, \d+\] to replace the lost "
                     r"node's \(2 warm\)", run.output)
    for rank in (2, 3):
        assert re.search(rf"\] takes rank {rank} after [\d.]+ s warm \(Megatron initialised and the model built as "
                         r"stand-in rank 1\)", run.output)
    for incarnation in (2, 3):
        assert re.search(rf"node 1\] node 1 was lost: this launcher takes its place in the running job "
                         rf"\(incarnation {incarnation}\)", run.output)
    assert len(re.findall(r"decision recover: faults [^\n]*\b[23]:node", run.output)) == 2
    for rank, source in ((2, 0), (3, 1)):  # a shard's other holder is on the other node
        received = rf"rank {rank}\] INFO repair of step \d+: received my optimizer shard \(\d+ tensors, " \
                   rf"\d+ bytes\) from rank {source}"
        assert len(re.findall(received, run.output)) == 2
    assert len(re.findall(r"ranks \[2,3\] replaced, training resumes at step \d+", run.output)) == 2


def test_each_launcher_that_took_node_1_hosted_its_controller_slot_again(node_1_lost_twice):
    """The launchers host the controllers by default (two nodes: node 0's active, node 1's a backup). Node 1's
    backup is lost with it; the standby, then the new launcher, host slot 1 again, and node 0's ranks adopt it
    each time, so the job keeps a backup controller."""
    run, _ = node_1_lost_twice
    assert re.search(r"node 0\] the recovery controllers run in the launchers of nodes 0\.\.1 \(the default with "
                     r"worker reboot", run.output)
    ports = re.findall(r"node 1\] backup controller started as pid \d+ on port (\d+), slot 1 of the list hosted "
                       r"again", run.output)
    assert len(set(ports)) == 2, ports
    for rank in (0, 1):
        adopted = re.findall(rf"rank {rank}\] INFO slot 1 of the controllers moved to a replaced node: controller "
                             rf"[\d.]+:(\d+)", run.output)
        assert adopted == ports, (rank, adopted, ports)


def test_no_replacement_in_time_dumps_and_the_resume_ends_bit_identical(tmp_path, reference_runs):
    steps, ckpt = StepWatch(4), tmp_path / "ckpt"
    cluster = LocalCluster([*FLAGS, "--save", str(ckpt), "--save-interval", "1000"], launch_flags=LOST_AFTER,
                           env={"MINDIO_ARF_WAIT_S": ARF_WAIT_S}, on_line=steps)
    cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    steps.wait(4, cluster)
    cluster.lose_node(node_1)
    run = cluster.wait()
    assert run.returncode != 0
    # Node 0's launcher told the controller that nothing will replace node 1's ranks; without elastic
    # training only a new launcher of node 1 could bring them back, so the wait went on to its end.
    assert re.search(r"ranks \[2,3\] will not be replaced: node 1 is lost \([^\n]*\) and no standby "
                     r"waits to take its place; without elastic training only a new launcher of their node brings "
                     r"them back", run.output), run.output[-6000:]
    assert "process replacement timed out after 5000 ms (MINDIO_ARF_WAIT_S)" in run.output
    dumped = re.search(r"dump of step (\d+) published", run.output)
    assert dumped, run.output[-6000:]
    step = int(dumped.group(1))
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    resumed = run_training(["--load", str(ckpt), "--enable-high-availability"]).require_success()
    reference, _ = reference_runs("ha")
    assert sorted(resumed.losses) == list(range(step + 1, 9))
    assert resumed.losses[step + 1] == reference.losses[step + 1]
    assert resumed.digest == reference.digest
