"""A fixed sequence of the chaos soak (bench/chaos.py), played by the bench's own code on the real
megatron.training: two launchers as two nodes (dp4, R=2, online repair and worker reboot on).

Node 0 lost twice: after step 3's line, node 0's launcher (the host of the launchers' store), its workers and
its controller are SIGKILLed, and a new launcher with node rank 0 is started 3 s later, as a rescheduled pod
would be; after step 6's line the same again, the new node 0 lost in turn. The run ends bit-identical to the
uninterrupted one, every loss line equal, every launcher that was not lost ending 0, no process left. With a
standby beside the job (its workers warm), node 0 lost once is taken by the standby itself, which on this machine
can listen at node 0's address. Six kinds mixed (the operator's pause and drain, a node lost during the pause, a
kill, a stall, a memory error) end bit-identical to their own uninterrupted run on the bench's bigger model."""
import re

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


MIXED_STEPS = 10
# Six kinds: the operator's pause with node 1 lost while the job holds, the operator's drain of rank 3 (a hot
# switch), rank 3's new process stalled, rank 0 killed once the stall ended, and a memory error repaired online. On
# the bench's bigger model (a step of ~0.6 s) the faults that come from outside land while the job trains. (A kill
# of rank 1 right after rank 3's switch once ended the job: a defect since fixed, docs/chaos.md, and tested in
# test_hot_switch's node drain. Here rank 1 is not killed: such a kill can also land in the memory error's online
# repair, which falls back to a dump that this run without --save cannot write.)
MIXED = "pause@2,node1@2,drain:rank=3@4,stall:rank=3,s=3@5,kill:rank=0@6,uce:rank=2@8"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The mixed sequence and its own uninterrupted reference (the bench's model, MIXED_STEPS steps); the soak's
    whole log is kept in its folder (a failure shows only its end)."""
    chaos = bench_script("chaos")
    model = chaos.MODEL_FLAGS.split()
    reference, _, _ = chaos.reference_run(MIXED_STEPS, model)
    soak = chaos.play(chaos.parse_sequence(MIXED, MIXED_STEPS), MIXED_STEPS, model, step_s=0.6)
    (tmp_path_factory.mktemp("mixed") / "output.txt").write_text(soak.run.output)
    return chaos, soak, reference


def test_six_kinds_mixed_end_bit_identical(mixed):
    chaos, soak, reference = mixed
    story = soak.run.output[-8000:]
    checked = chaos.compare(soak, reference)
    assert soak.ended == "finished", story
    assert [(f.name(), f.outcome) for f in soak.faults] == [(f.name(), "recovered") for f in soak.faults], story
    assert checked["digest_equal"] and checked["loss_lines_differing"] == [], story
    assert checked["launchers_all_0"] and checked["processes_left"] == [], checked["launcher_codes"]


def test_the_node_lost_during_the_pause_is_replaced_and_each_fault_has_its_recovery(mixed):
    _, soak, _ = mixed
    out = soak.run.output
    # the two ranks of the lost node are node faults, replaced, even though they could not take the CONTINUE
    assert re.search(r"state NORMAL -> PAUSE: training paused after step \d+", out), out[-6000:]
    assert re.search(r"decision recover: faults (\d:\w+ )*2:node 3:node", out), out[-6000:]
    assert "did not take the CONTINUE" not in out
    # the controller's answer to each (faults that land close together share their windows in the soak's table)
    assert re.search(r"decision retry: faults 2:memory", out), out[-6000:]
    assert re.search(r"decision recover: faults 0:node", out), out[-6000:]
    assert re.search(r"ranks \[3\] switched to new processes, training resumes at step \d+", out), out[-6000:]
