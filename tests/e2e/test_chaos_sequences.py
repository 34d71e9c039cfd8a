"""A fixed sequence of the chaos soak (bench/chaos.py), played by the bench's own code on the real
megatron.training: two launchers as two nodes (dp4, R=2, online repair and worker reboot on).

Node 0 lost twice: after step 3's line, node 0's launcher (the host of the launchers' store), its workers and
its controller are SIGKILLed, and a new launcher with node rank 0 is started 3 s later, as a rescheduled pod
would be; after step 6's line the same again, the new node 0 lost in turn. The run ends bit-identical to the
uninterrupted one, every loss line equal, every launcher that was not lost ending 0, no process left. With a
standby beside the job (its workers warm), node 0 lost once is taken by the standby itself, which on this machine
can listen at node 0's address."""
import pytest

from mindio_adaptor.tiny.job import bench_script

pytestmark = pytest.mark.e2e
STEPS = 8  # the shared uninterrupted reference's (tests/e2e/conftest.py)


def node_0_lost(sequence, reference_runs, standby):
    """The sequence played; returns the soak, its check against the reference, and its story, once every fault
    recovered and the run ended bit-identical with the same loss lines and nothing left running."""
    chaos = bench_script("chaos")
    soak = chaos.play(chaos.parse_sequence(sequence, STEPS), STEPS, step_s=0.3, standby=standby)
    story = soak.run.output[-8000:]
    reference, _ = reference_runs("ha")
    checked = chaos.compare(soak, reference)
    assert soak.ended == "finished", story
    assert {f.outcome for f in soak.faults} == {"recovered"}, ([f.name() for f in soak.faults], story)
    assert checked["digest_equal"], story
    assert checked["loss_lines_differing"] == [], story
    assert checked["launchers_all_0"] and checked["processes_left"] == [], checked["launcher_codes"]
    return soak, checked, story


def test_node_0_lost_twice_ends_bit_identical(reference_runs):
    _, checked, _ = node_0_lost("node0@3,node0@6", reference_runs, standby=False)
    assert [len(codes) for codes in checked["launcher_codes"].values()] == [3, 1], checked["launcher_codes"]


def test_node_0_lost_with_a_standby_ends_bit_identical(reference_runs):
    # Once: a second loss of 8 steps' node 0 can come as the job ends, which a new launcher then waits for.
    soak, _, story = node_0_lost("node0@3", reference_runs, standby=True)
    assert "this standby takes node 0's place, hosting the launchers' store" in soak.run.output, story
    assert "node 0 was lost: this launcher takes its place in the running job (incarnation 2)" in soak.run.output
