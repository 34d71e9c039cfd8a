"""Faults around checkpoint saves and at the end of a job, on the real megatron.training (dp4, R=2,
4 gloo processes). A rank lost inside a periodic save leaves a checkpoint that is not marked latest; the
survivors' dump replaces it and resumes to the uninterrupted run. A rank failing inside the final save
after its own write, the others waiting at the save's barrier, ends in a dump of the last step, which
loads. A save abandoned with no dump to replace it is removed, the tracker untouched. A rank lost while
the processes exit, after training finished, is not acted on: the others end as a completed run does. No
process of a run is left."""
import re

import pytest

from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
TRACKER = "latest_checkpointed_iteration.txt"


def faulted(tmp, spec):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(tmp / "faults")}


@pytest.fixture(scope="module")
def periodic_save_fault(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("periodic_save_fault")
    ckpt = tmp / "ckpt"
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "4"],
                       env=faulted(tmp, "kill:rank=2,step=4,phase=save"))
    return run, ckpt


def test_a_rank_lost_in_a_periodic_save_leaves_only_the_dump_marked_latest(periodic_save_fault):
    run, ckpt = periodic_save_fault
    assert run.returncode != 0
    assert "fault injection: firing kill on rank 2 at step 4 (save)" in run.output
    assert not re.search(r"successfully saved checkpoint from iteration\s+4 to \S+/ckpt ", run.output)
    # Whether rank 0 had created iter_0000004 before the others' save failed is a race; when it had, the
    # dump replaced it (core/checkpoint/dump_dir.publish, unit-tested) and said so.
    if "iter_0000004 was not marked complete" in run.output:
        assert "an interrupted save, replaced by the dump" in run.output
    assert "dump of step 4 published" in run.output
    assert (ckpt / TRACKER).read_text().strip() == "4"
    assert sorted(p.name for p in ckpt.iterdir()) == ["iter_0000004", TRACKER]
    assert run.leftover == []


@pytest.fixture(scope="module")
def resumed_and_lost_at_exit(periodic_save_fault, tmp_path_factory):
    """The dump resumed to the end; rank 3 is killed as its process exits, after training finished."""
    _, ckpt = periodic_save_fault
    tmp = tmp_path_factory.mktemp("lost_at_exit")
    run = run_training([*HA, "--load", str(ckpt), "--save", str(ckpt), "--save-interval", "4"],
                       env=faulted(tmp, "kill:rank=3,step=8,phase=exit"))
    return run, ckpt


def test_the_dump_of_an_interrupted_save_resumes_like_the_uninterrupted_run(resumed_and_lost_at_exit,
                                                                            reference_runs):
    run, ckpt = resumed_and_lost_at_exit
    assert sorted(run.losses) == [5, 6, 7, 8]
    assert run.digest == reference_runs("ha")[0].digest
    assert (ckpt / TRACKER).read_text().strip() == "8"


def test_a_rank_lost_after_training_finished_is_not_acted_on(resumed_and_lost_at_exit):
    run, _ = resumed_and_lost_at_exit
    assert "fault injection: firing kill on rank 3 at step 8 (exit)" in run.output
    assert re.search(r"rank \d finished training: the job has completed", run.output)
    assert re.search(r"fault after the job completed \(rank \d finished training\), not acted on: rank 3 node",
                     run.output), run.output[-3000:]
    assert "decision" not in run.output and "action stop" not in run.output
    for rank in (0, 1, 2):
        assert re.search(rf"rank {rank} pid \d+ done", run.output)
    assert re.search(r"exitcode\s*: -9 \(pid: \d+\)", run.output)  # the launcher reports the killed rank only
    assert not re.search(r"exitcode\s*: 1 ", run.output)
    assert run.leftover == []


@pytest.fixture(scope="module")
def save_abandoned_without_a_dump(tmp_path_factory):
    """Both holders of shard 1 (ranks 1 and 3) lost inside the periodic save of step 4: no dump is
    possible and the job ends."""
    tmp = tmp_path_factory.mktemp("save_abandoned")
    ckpt = tmp / "ckpt"
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "2"],
                       env=faulted(tmp, "kill:rank=1,step=4,phase=save;kill:rank=3,step=4,phase=save"))
    return run, ckpt


def test_a_save_abandoned_without_a_dump_is_removed_and_the_tracker_untouched(save_abandoned_without_a_dump):
    run, ckpt = save_abandoned_without_a_dump
    assert run.returncode != 0
    assert "dump impossible, no complete replica: type 0 group 0 shard 1" in run.output
    if "the checkpoint save of iteration 4 was interrupted" in run.output:  # iter_0000004 had been created
        assert "its partial iter_0000004 is removed (the resume point stays iteration 2; the job ends)" in run.output
    assert (ckpt / TRACKER).read_text().strip() == "2"
    assert sorted(p.name for p in ckpt.iterdir()) == ["iter_0000002", TRACKER]
    assert run.leftover == []


ASYNC = ["--async-save", "--use-persistent-ckpt-worker", "--async-strategy", "mcore", "--ckpt-format", "torch_dist"]


@pytest.fixture(scope="module")
def async_save_fault(tmp_path_factory):
    """Asynchronous saves (Megatron's persistent writer) every 5 steps; rank 2 killed in step 6, while
    the save of step 5 may still be unfinalized."""
    tmp = tmp_path_factory.mktemp("async_save_fault")
    ckpt = tmp / "ckpt"
    run = run_training([*HA, *ASYNC, "--save", str(ckpt), "--save-interval", "5"],
                       env=faulted(tmp, "kill:rank=2,step=6,phase=backward"))
    return run, ckpt


def test_with_asynchronous_saves_the_dump_is_written_and_resumes_like_the_uninterrupted_run(async_save_fault,
                                                                                           reference_runs):
    run, ckpt = async_save_fault
    assert run.returncode != 0
    assert "dump of step 5 published" in run.output
    if "not finalized before the fault: the writer is aborted" in run.output:
        assert re.search(r"asynchronous checkpoint save\(s\) of iteration\(s\) \[5\]", run.output)
    assert (ckpt / TRACKER).read_text().strip() == "5"
    assert sorted(p.name for p in ckpt.iterdir()) == ["iter_0000005", TRACKER]
    assert (ckpt / "iter_0000005" / ".metadata").exists()
    assert run.leftover == []  # the killed rank's forkserver and persistent writer ended with it
    resumed = run_training([*HA, "--load", str(ckpt), "--ckpt-format", "torch_dist"]).require_success()
    assert sorted(resumed.losses) == [6, 7, 8]
    assert resumed.digest == reference_runs("ha")[0].digest


@pytest.fixture(scope="module")
def final_save_fault(tmp_path_factory):
    """Rank 1 fails inside the final save once it wrote its files: the others wait at the save's closing
    barrier with their files written and their write results queued. A raise, not a kill: a lost rank also
    ended the helper process of the others' checkpoint-writer queues here (torchrun's SIGTERM, and on one
    node under `mindio-adaptor launch` as well), and the new, empty queue hid what the abandoned save left
    in it; the survivors of a node lost under the launchers kept theirs."""
    tmp = tmp_path_factory.mktemp("final_save_fault")
    ckpt = tmp / "ckpt"
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"],
                       env=faulted(tmp, "raise:rank=1,step=8,phase=written"))
    return run, ckpt


def test_a_rank_failing_in_the_final_save_after_its_write_ends_in_a_dump_of_the_last_step_that_loads(
        final_save_fault, reference_runs):
    run, ckpt = final_save_fault
    assert run.returncode != 0 and sorted(run.losses) == list(range(1, 9))
    assert "fault injection: firing raise on rank 1 at step 8 (written)" in run.output
    assert "step 8: training failed with RuntimeError: Other ERROR; reported as" in run.output
    # The abandoned save's write results, left in the savers' queues, are not the dump's metadata.
    assert re.search(r"before the save of step 8: dropped 1 write result\(s\) of an abandoned checkpoint save",
                     run.output), run.output[-3000:]
    assert "dump of step 8 published" in run.output
    assert (ckpt / TRACKER).read_text().strip() == "8"
    assert run.leftover == []
    loaded = run_training([*HA, "--load", str(ckpt)]).require_success()
    assert "loaded checkpoint" in loaded.output and loaded.losses == {}
    assert loaded.digest == reference_runs("ha")[0].digest
