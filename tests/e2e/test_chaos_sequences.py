"""A fixed sequence of the chaos soak (bench/chaos.py), played by the bench's own code on the real
megatron.training: two launchers as two nodes (dp4, R=2, online repair and worker reboot on).

Node 0 lost twice: after step 3's line, node 0's launcher (the host of the launchers' store), its workers and
its controller are SIGKILLed, and a new launcher with node rank 0 is started 3 s later, as a rescheduled pod
would be; after step 6's line the same again, the new node 0 lost in turn. The run ends bit-identical to the
uninterrupted one, every loss line equal, every launcher that was not lost ending 0, no process left. With a
standby beside the job (its workers warm), the first loss is taken by the standby itself, which on this machine
can listen at node 0's address; the scheduler's next standby is still starting at the second, so a new launcher
takes that one."""
import pytest

from mindio_adaptor.tiny_job import bench_script

pytestmark = pytest.mark.e2e
STEPS = 8  # the shared uninterrupted reference's (tests/e2e/conftest.py)


def test_node_0_lost_twice_ends_bit_identical(reference_runs):
    chaos = bench_script("chaos")
    soak = chaos.play(chaos.parse_sequence("node0@3,node0@6", STEPS), STEPS, step_s=0.3)
    story = soak.run.output[-8000:]
    reference, _ = reference_runs("ha")
    checked = chaos.compare(soak, reference)
    assert soak.ended == "finished", story
    assert [f.outcome for f in soak.faults] == ["recovered", "recovered"], ([f.name() for f in soak.faults], story)
    assert checked["digest_equal"], story
    assert checked["loss_lines_differing"] == [], story
    assert checked["launchers_all_0"] and [len(codes) for codes in checked["launcher_codes"].values()] == [3, 1], \
        checked["launcher_codes"]
    assert checked["processes_left"] == []


def test_node_0_lost_twice_with_a_standby_ends_bit_identical(reference_runs):
    chaos = bench_script("chaos")
    soak = chaos.play(chaos.parse_sequence("node0@3,node0@6", STEPS), STEPS, step_s=0.3, standby=True)
    story = soak.run.output[-8000:]
    reference, _ = reference_runs("ha")
    checked = chaos.compare(soak, reference)
    assert soak.ended == "finished", story
    assert [f.outcome for f in soak.faults] == ["recovered", "recovered"], ([f.name() for f in soak.faults], story)
    assert checked["digest_equal"], story
    assert checked["loss_lines_differing"] == [], story
    assert "this standby takes node 0's place, hosting the launchers' store" in soak.run.output, story
    assert "node 0 was lost: this launcher takes its place in the running job (incarnation 2)" in soak.run.output
    assert checked["launchers_all_0"] and checked["processes_left"] == [], checked["launcher_codes"]
