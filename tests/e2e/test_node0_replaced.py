"""Node 0 lost, on the real megatron.training (dp4, R=2, gloo, --enable-worker-reboot): two `mindio-adaptor
launch` processes play two nodes of two ranks each and host the controllers (`--controllers 2`: node 0's is
active, node 1's a backup). After step 3 node 0 is lost: its launcher (the host of the launchers' store and
of the generation's first workers' store), its two workers and its controller process are SIGKILLed
together. Once the backup controller has judged node 0's ranks lost (they never registered with it within
MINDIO_TAKEOVER_WAIT_S) and decided their replacement, the test starts a new launcher with `--node-rank 0`, as a rescheduled pod would be.

Nothing the job needs lived only on node 0: node 1 hosts a workers' store beside its backup controller
and every fact was published there too. Node 1's ranks register with the backup, which takes over, judges
node 0's ranks lost when they never register, and takes the new node 0's workers in as their replacements;
the survivors and the replacements meet at node 1's store, the replacements receive their shards from
node 1's ranks, and the run ends bit-identical to the uninterrupted one with node 1's processes unchanged.
One faulted run, checked several ways."""
import re
import threading

import pytest

from mindio_adaptor.tiny_job import LocalCluster, process_ids

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot"]
STEP_3 = re.compile(r"iteration\s+3/")
# The backup judges ranks 0 and 1 lost: "did not register within 3000 ms of the takeover" when they died
# first, "connection lost" when they reached the backup before lose_node's SIGKILL got to them; either way
# it decides their replacement before any new process exists.
DECIDED = re.compile(r"decision recover: faults 0:node 1:node\b")
TAKEOVER_WAIT_S = "3"  # node 0's ranks are judged lost well before a new node 0's workers could register


@pytest.fixture(scope="module")
def node_0_lost(tmp_path_factory):
    step_3, decided = threading.Event(), threading.Event()

    def on_line(line):
        if STEP_3.search(line):
            step_3.set()
        if DECIDED.search(line):
            decided.set()

    cluster = LocalCluster(FLAGS, env={"MINDIO_TAKEOVER_WAIT_S": TAKEOVER_WAIT_S},
                           launch_flags=["--controllers", "2", "--node-lost-after", "3"], on_line=on_line)
    node_0 = cluster.start_node("--node-rank", "0")
    cluster.start_node("--node-rank", "1")
    cluster.wait_for(step_3, "step 3")  # logged by rank 3, on node 1
    lost = cluster.lose_node(node_0)  # the launcher, its workers and its controller process
    cluster.wait_for(decided, "the backup's decision to replace node 0's ranks")
    cluster.start_node("--node-rank", "0")
    run = cluster.wait(timeout=500)
    (tmp_path_factory.mktemp("node_0_lost") / "output.log").write_text(run.output)  # the whole story, for a failure
    return run, lost


def test_the_run_ends_bit_identical_to_the_uninterrupted_one(node_0_lost, reference_runs):
    run, _ = node_0_lost
    run.require_success()
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_node_1s_processes_never_change_and_node_0s_were_replaced(node_0_lost):
    run, lost = node_0_lost
    seen = process_ids(run.output)
    for rank in (2, 3):
        assert len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"], seen
    for rank in (0, 1):
        first, last = seen[rank]["starting"]
        assert first in lost and seen[rank]["done"] == [last], (seen, lost)
    assert re.search(r"node 0\] node 0 was lost: this launcher takes its place in the running job "
                     r"\(incarnation 2\)", run.output), run.output[-6000:]


def test_the_backup_took_over_and_led_the_repair(node_0_lost):
    run, _ = node_0_lost
    assert re.search(r"backup controller taking over as term 2", run.output), run.output[-6000:]
    assert DECIDED.search(run.output)
    judged = re.findall(r"fault on rank ([01]) \(node\): (not registered with the controller of term 2|connection "
                        r"lost)", run.output)
    assert {rank for rank, _ in judged} == {"0", "1"}, judged
    assert re.search(r"ranks \[0,\s*1\] replaced, training resumes at step \d+", run.output)


def test_the_new_node_0s_ranks_were_repaired_from_node_1s_replicas(node_0_lost):
    run, _ = node_0_lost
    for rank, source in ((0, 2), (1, 3)):  # a shard's other holder is on the other node
        assert re.search(rf"rank {rank}\] INFO repair of step \d+: received my optimizer shard \(\d+ tensors, "
                         rf"\d+ bytes\) from rank {source}", run.output), run.output[-6000:]


def test_every_worker_got_node_1s_store_beside_its_controller(node_0_lost):
    """The workers' stores are listed beside the controllers; the new node 0's workers got the survivors'
    list (its lost slot 0 included), so its replacements read the job's facts where the survivors meet."""
    run, _ = node_0_lost
    lists = re.findall(r"node (\d)\] generation 0: started ranks \[[\d, ]+\] as pids \[[\d, ]+\][^;\n]*; "
                       r"workers' store at [\d.]+:(\d+), beside the controllers (\S+)", run.output)
    assert len(lists) == 3, lists
    (first_0, new_0), (node_1,) = [[found for found in lists if found[0] == node] for node in "01"]
    assert first_0[2] == node_1[2] == new_0[2], lists
    assert first_0[2].split(",")[0].endswith(":" + first_0[1])  # slot 0: node 0's MASTER_PORT store
    assert new_0[1] != first_0[1]  # the new node 0 hosts a fresh store, which its workers do not need
    beside_backup = node_1[2].split(",")[1]
    for rank in range(4):  # survivors and replacements met at node 1's store, the one beside the backup
        assert re.search(rf"rank {rank}\] INFO communicators rebuilt \(epoch 1, store {beside_backup}\)",
                         run.output), run.output[-6000:]
