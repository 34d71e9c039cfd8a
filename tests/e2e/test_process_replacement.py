"""Process replacement on the real megatron.training (dp4, R=2, gloo, --enable-worker-reboot) under
`mindio-adaptor launch`: a SIGKILLed rank is started again alone, joins the running job, receives its
shard and the step's state from a replica peer, and the run ends bit-identical to the uninterrupted
one while the other ranks keep their processes."""
import re

import pytest

from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
# Megatron's default loader workers (the tiny job reads in the rank's process): a replacement positions a loader
# whose samples come from forked workers.
REBOOT = ["--enable-high-availability", "--enable-worker-reboot", "--num-workers", "2"]
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")


def test_killed_rank_0_is_replaced_and_only_its_pid_changes(tmp_path, reference_runs):
    # Rank 0: with the controller in its process, its death took the recovery down with it. The launcher
    # hosts the controller by default now, so rank 0 is replaced like any other rank. It dies in step 3's
    # training_log, the step's losses reduced everywhere and its line not printed: the line is printed after the
    # recovery, by Megatron on every rank, the replacement included (its loop, and its interval timer, not begun).
    env = {"MINDIO_FAULT_INJECT": "kill:rank=0,step=3,phase=line", "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}
    run = run_training(REBOOT, env=env, launcher=LAUNCH).require_success()
    assert "the recovery controllers run in the launchers of nodes 0..0 (the default with worker reboot" in run.output
    assert re.search(r"active controller started as pid \d+", run.output)
    # The peers' communication errors may be listed beside the death (faults are listed by rank).
    assert re.search(r"decision recover: faults [^\n]*\b0:node", run.output)
    assert "replacement process of rank 0: Megatron starts on the fake backend" in run.output
    assert re.search(r"rank 0\] INFO repair of step 3: received my optimizer shard \(\d+ tensors, \d+ bytes\) "
                     r"from rank 2", run.output)
    assert "replacement process: train data iterator positioned at sample 48" in run.output
    assert "ranks [0] replaced, training resumes at step 3" in run.output
    assert "step 3: loss line printed after the recovery (reduced before the fault)" in run.output
    seen = process_ids(run.output)
    for rank in (1, 2, 3):  # one process from start to end
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[0]["starting"])) == 2 and seen[0]["done"] == seen[0]["starting"][1:], seen
    reference, _ = reference_runs("ha")
    assert sorted(run.loss_line_steps) == list(range(1, 9))  # each step's line once
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_hung_rank_is_ended_and_replaced_by_a_warm_spare(tmp_path, reference_runs):
    # No timeout variable set: the hang rule names rank 3, the controller has its process end (a hung
    # process ends itself on EXIT) and the launcher hands its rank to a warm spare worker (Megatron
    # initialised, the model and the datasets built as a stand-in rank). Rank 3 is the rank that prints
    # Megatron's losses: its replacement logs them as the uninterrupted run does.
    env = {"MINDIO_FAULT_INJECT": "hang:rank=3,step=5", "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}
    run = run_training(REBOOT, env=env, launcher=(*LAUNCH, "--spare-workers", "1")).require_success()
    spare = re.search(r"warm spare workers started: pids \[(\d+)\]", run.output)
    assert spare and f"rank 3 started again alone as pid {spare.group(1)}, a warm spare" in run.output
    # It had run the script ahead as stand-in rank 1 (DP only: every rank's model is the same) and built the
    # model and the datasets; it took rank 3's place in a fake world of its own before the optimizer's build.
    assert re.search(rf"\[mindio-warm pid {spare.group(1)}\] takes rank 3 after [\d.]+ s warm \(Megatron "
                     r"initialised and the model built as stand-in rank 1\)", run.output)
    assert "warm spare (stand-in rank 1): Megatron starts on the fake backend" in run.output
    assert "warm spare: datasets built ahead" in run.output
    assert re.search(r"rank 3\] INFO warm spare: took rank 3 \(built as stand-in rank 1\)", run.output)
    assert re.search(r"hang: .*furthest behind: \[3\]", run.output)
    assert re.search(r"decision recover: faults [^\n]*\b3:node", run.output)
    assert "the controller ended the job and the training thread is hung: ending the process" in run.output
    assert "ranks [3] replaced, training resumes at step 4" in run.output
    seen = process_ids(run.output)
    for rank in (0, 1, 2):
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[3]["starting"])) == 2, seen
    assert run.losses == reference_runs("ha")[0].losses
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    assert run.digest == reference_runs("ha")[0].digest
