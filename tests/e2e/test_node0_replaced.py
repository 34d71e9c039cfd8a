"""Node 0 lost, then node 1, on the real megatron.training (dp4, R=2, gloo, --enable-worker-reboot): two
`mindio-adaptor launch` processes play two nodes of two ranks each and host the controllers (`--controllers 2`:
node 0's is active, node 1's a backup). After step 3 node 0 is lost: its launcher (the host of the launchers'
store and of the generation's first workers' store), its two workers and its controller process are SIGKILLed
together. Once the backup controller has judged node 0's ranks lost (they never registered with it within
MINDIO_TAKEOVER_WAIT_S) and decided their replacement, the test starts a new launcher with `--node-rank 0`,
as a rescheduled pod would be.

Nothing the job needs lived only on node 0: node 1 hosts a workers' store beside its backup controller
and every fact was published there too. Node 1's ranks register with the backup, which takes over, judges
node 0's ranks lost when they never register, and takes the new node 0's workers in as their replacements;
the survivors and the replacements meet at node 1's store, and the replacements receive their shards from
node 1's ranks.

The new node 0 hosts slot 0 of the controllers again (a backup controller and a workers' store on new
ports), which node 1's ranks adopt when the replacements join. So when node 1, the leader's node now, is
lost after step 6, the new node 0's controller takes over as term 3, and a new node 1 joins the same way.
The run ends bit-identical to the uninterrupted one; each node's processes changed only when it was lost.
One faulted run, checked several ways."""
import re
import threading

import pytest

from mindio_adaptor.tiny.job import LocalCluster, process_ids

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
STEP_LOGGED = re.compile(r"iteration\s+(\d+)/")
# The leader judges a lost node's ranks lost: "did not register within 3000 ms of the takeover" when they
# died first, "connection lost" when they reached the new leader before lose_node's SIGKILL got to them;
# either way it decides their replacement before any new process exists.
# The survivors' own communication errors may be listed beside the lost ranks (faults are listed by rank).
DECIDED = {0: re.compile(r"decision recover: faults [^\n]*\b0:node 1:node\b"),
           1: re.compile(r"decision recover: faults [^\n]*\b2:node 3:node\b")}
TAKEOVER_WAIT_S = "3"  # a lost node's ranks are judged lost well before a new node's workers could register


class Watch:
    """Events set when a line first shows up: Megatron's log line of a step (printed by rank 3) and the
    leader's decision to replace a lost node's ranks."""

    def __init__(self):
        self.steps = {3: threading.Event(), 6: threading.Event()}
        self.decided = {node: threading.Event() for node in DECIDED}

    def __call__(self, line):
        match = STEP_LOGGED.search(line)
        if match and int(match.group(1)) in self.steps:
            self.steps[int(match.group(1))].set()
        for node, pattern in DECIDED.items():
            if pattern.search(line):
                self.decided[node].set()


@pytest.fixture(scope="module")
def node_0_lost(tmp_path_factory):
    watch = Watch()
    cluster = LocalCluster(FLAGS, env={"MINDIO_TAKEOVER_WAIT_S": TAKEOVER_WAIT_S},
                           launch_flags=["--controllers", "2", "--node-lost-after", "3"], on_line=watch)
    node_0 = cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    cluster.wait_for(watch.steps[3], "step 3")  # logged by rank 3, on node 1
    lost = cluster.lose_node(node_0)  # the launcher, its workers and its controller process
    cluster.wait_for(watch.decided[0], "the backup's decision to replace node 0's ranks")
    cluster.start_node("--node-rank", "0")
    cluster.wait_for(watch.steps[6], "step 6")
    lost_1 = cluster.lose_node(node_1)  # the leader's node now: its controller of term 2 goes with it
    cluster.wait_for(watch.decided[1], "the new node 0's controller's decision to replace node 1's ranks")
    cluster.start_node("--node-rank", "1")
    run = cluster.wait(timeout=500)
    (tmp_path_factory.mktemp("node_0_lost") / "output.log").write_text(run.output)  # the whole story, for a failure
    return run, lost, lost_1


def test_the_run_ends_bit_identical_to_the_uninterrupted_one(node_0_lost, reference_runs):
    run, _, _ = node_0_lost
    run.require_success()
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # each step's line once
    assert run.digest == reference.digest


def test_each_nodes_processes_changed_only_when_it_was_lost(node_0_lost):
    run, lost_0, lost_1 = node_0_lost
    seen = process_ids(run.output)
    for rank, lost in ((0, lost_0), (1, lost_0), (2, lost_1), (3, lost_1)):
        first, last = seen[rank]["starting"]
        assert first in lost and last not in lost and seen[rank]["done"] == [last], (seen, lost_0, lost_1)
    for node in (0, 1):
        assert re.search(rf"node {node}\] node {node} was lost: this launcher takes its place in the running job "
                         r"\(incarnation 2\)", run.output), run.output[-6000:]


def test_the_backup_took_over_then_the_new_node_0s_controller(node_0_lost):
    run, _, _ = node_0_lost
    assert re.search(r"backup controller taking over as term 2", run.output), run.output[-6000:]
    assert re.search(r"backup controller taking over as term 3", run.output), run.output[-6000:]
    judged = re.findall(r"fault on rank (\d) \(node\): (not registered with the controller of term (\d)|connection "
                        r"lost)", run.output)
    assert {rank for rank, _, _ in judged} == {"0", "1", "2", "3"}, judged
    assert re.search(r"ranks \[0,\s*1\] replaced, training resumes at step \d+", run.output)
    assert re.search(r"ranks \[2,\s*3\] replaced, training resumes at step \d+", run.output)


def test_each_lost_nodes_ranks_were_repaired_from_the_other_nodes_replicas(node_0_lost):
    run, _, _ = node_0_lost
    for rank, source in ((0, 2), (1, 3), (2, 0), (3, 1)):  # a shard's other holder is on the other node
        assert re.search(rf"rank {rank}\] INFO repair of step \d+: received my optimizer shard \(\d+ tensors, "
                         rf"\d+ bytes\) from rank {source}", run.output), run.output[-6000:]


def test_each_new_node_hosted_its_slot_again_and_the_others_adopted_it(node_0_lost):
    run, _, _ = node_0_lost
    rehosted = re.search(r"node 0\] backup controller started as pid \d+ on port (\d+), slot 0 of the list hosted "
                         r"again", run.output)
    assert rehosted, run.output[-6000:]
    for rank in (2, 3):  # node 1's first ranks, which held the lost node 0's slot
        assert re.search(rf"rank {rank}\] INFO slot 0 of the controllers moved to a replaced node: controller "
                         rf"[\d.]+:{rehosted.group(1)}, store [\d.]+:\d+ \(facts copied there: "
                         r"(comm/last_epoch, )?layout_inputs\)", run.output), run.output[-6000:]  # no epoch before the first rebuild
    for rank in (0, 1):  # and the new node 0's ranks adopted the new node 1's slot in turn
        assert re.search(rf"rank {rank}\] INFO slot 1 of the controllers moved to a replaced node", run.output)


def test_the_ranks_met_beside_the_leader_each_time(node_0_lost):
    """Every rank rebuilds its communicators at the store beside the controller leading it: node 1's after
    node 0's loss, the new node 0's after node 1's. Each node's workers got the list with its own slot."""
    run, _, _ = node_0_lost
    lists = re.findall(r"node (\d)\] generation 0: started ranks \[[\d, ]+\] as pids \[[\d, ]+\][^;\n]*; "
                       r"workers' store at [\d.]+:(\d+), beside the controllers (\S+)", run.output)
    lists[:2] = sorted(lists[:2])  # the first two launchers start side by side: their lines come in either order
    assert [node for node, _, _ in lists] == ["0", "1", "0", "1"], lists
    (first_0, _, new_0, new_1) = [found[2].split(",") for found in lists]
    assert first_0[0].endswith(":" + lists[0][1])  # slot 0: node 0's MASTER_PORT store
    assert new_0[0] != first_0[0] and new_0[0].endswith(":" + lists[2][1])  # the new node 0's, hosted again
    assert new_1 == [new_0[0], new_1[1]] and new_1[1] != first_0[1]  # the new node 1 hosts slot 1 again
    for rank in range(4):
        assert re.search(rf"rank {rank}\] INFO communicators rebuilt \(epoch 1, store {first_0[1]}\)", run.output)
        assert re.search(rf"rank {rank}\] INFO communicators rebuilt \(epoch 2, store {new_0[0]}\)", run.output), \
            run.output[-6000:]
