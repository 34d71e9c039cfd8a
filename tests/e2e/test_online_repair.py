"""Online repair on the real megatron.training (dp4, R=2, gloo, --enable-hbmfault-repair): the faulty
rank gets its optimizer shard from a replica peer, every rank rolls back and recomputes the step, no
process restarts, and the run ends bit-identical to the uninterrupted one."""
import re

import pytest

from mindio_adaptor.tiny_job import process_ids, run_training

pytestmark = pytest.mark.e2e
REPAIR = ["--enable-high-availability", "--enable-hbmfault-repair"]


def inject(spec, tmp_path):
    return {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(tmp_path / "faults")}


def test_uce_error_in_forward_is_repaired_online(tmp_path, reference_runs):
    run = run_training(REPAIR, env=inject("raise:rank=1,step=5,msg=UCE ERROR injected", tmp_path)).require_success()
    assert "step 5: training failed with RuntimeError: UCE ERROR injected; reported as UCE" in run.output
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert re.search(r"repair of step 4: received my optimizer shard \(\d+ tensors, \d+ bytes\) from rank 3",
                     run.output)
    assert "online repair finished at step 4" in run.output
    assert sorted(run.losses) == list(range(1, 9))
    for rank, seen in process_ids(run.output).items():  # one process per rank, from start to end
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    assert len(process_ids(run.output)) == 4
    reference, _ = reference_runs("ha")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_uce_error_mid_update_is_repaired_at_the_last_completed_step(tmp_path, reference_runs):
    # dp4, R=2: instance {0,1} stops in step 5's optimizer phase (rank 1 faults, rank 0 waits for it in
    # the instance's collectives) while instance {2,3} completes step 5: the repair goes forward to
    # step 5, ranks 0 and 1 take their shards and step 5's state from ranks 2 and 3.
    spec = "raise:rank=1,step=5,phase=optimizer,msg=UCE ERROR mid-update"
    run = run_training(REPAIR, env=inject(spec, tmp_path)).require_success()
    assert "decision retry: faults 1:memory repair_step=5 repair_set=[0,1]" in run.output
    assert "not waiting for ranks [0]" in run.output
    assert re.search(r"rank 0\] INFO repair of step 5: received my optimizer shard .* from rank 2", run.output)
    assert re.search(r"rank 1\] INFO repair of step 5: received my optimizer shard .* from rank 3", run.output)
    assert "online repair finished at step 5" in run.output
    for rank, seen in process_ids(run.output).items():
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    reference, _ = reference_runs("ha")
    # Step 5's loss is reduced over the data-parallel group after the update, for display only: the
    # fault interrupted that reduction and the step is not recomputed, so it is not printed.
    assert sorted(run.losses) == [1, 2, 3, 4, 6, 7, 8]
    assert run.losses == {step: loss for step, loss in reference.losses.items() if step != 5}
    assert run.digest == reference.digest


def test_two_ranks_holding_different_shards_repaired_together(tmp_path, reference_runs):
    # dp4, R=2: shard 1 on ranks 1 and 3, shard 0 on ranks 0 and 2
    spec = "raise:rank=1,step=5,msg=UCE ERROR a;raise:rank=2,step=5,msg=UCE ERROR b"
    run = run_training(REPAIR, env=inject(spec, tmp_path)).require_success()
    assert "repair_set=[1,2]" in run.output
    assert re.search(r"rank 1\] INFO repair of step 4: received my optimizer shard .* from rank 3", run.output)
    assert re.search(r"rank 2\] INFO repair of step 4: received my optimizer shard .* from rank 0", run.output)
    reference, _ = reference_runs("ha")
    assert run.digest == reference.digest


def test_tp2_dp2_fault_repaired_online(tmp_path, reference_runs):
    tp2 = ["--tensor-model-parallel-size", "2"]
    run = run_training([*REPAIR, *tp2], env=inject("raise:rank=1,step=5,msg=UCE ERROR tp", tmp_path))
    run.require_success()
    assert "online repair finished at step 4" in run.output
    reference, _ = reference_runs("ha_tp2")
    assert run.digest == reference.digest


def test_without_replicas_the_periodic_checkpoint_is_reloaded_online(tmp_path, reference_runs):
    # R=1: rank 1's shard has no other holder; every rank loads the checkpoint of step 3 again, in the
    # running processes, and steps 4 and 5 are computed again.
    ckpt = tmp_path / "ckpt"
    flags = [*REPAIR, "--distributed-optimizer-no-replica", "--save", str(ckpt), "--save-interval", "3"]
    run = run_training(flags, env=inject("raise:rank=1,step=5,msg=UCE ERROR no replica", tmp_path))
    run.require_success()
    assert ("decision retry: faults 1:memory repair_step=4 repair_set=[1] repairable=0 dump_possible=0 "
            "reload_step=3") in run.output
    assert len(re.findall(r"reloaded the checkpoint of step 3 from", run.output)) == 4
    assert "online reload finished at step 3" in run.output
    for rank, seen in process_ids(run.output).items():
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)
    reference, _ = reference_runs("ha_no_replica")
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_second_fault_during_the_repair_falls_back_to_the_dump(tmp_path, reference_runs):
    ckpt = tmp_path / "ckpt"
    # dp4, R=2: after rank 2 dies, shard 0 is still on rank 0 and shard 1 on rank 3.
    spec = "raise:rank=1,step=5,msg=UCE ERROR first;kill:rank=2,step=5,phase=repair"
    run = run_training([*REPAIR, "--save", str(ckpt), "--save-interval", "1000"],
                       env={**inject(spec, tmp_path), "MINDIO_REBUILD_TIMEOUT_S": "5"})
    assert run.returncode != 0
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert "fault injection: firing kill on rank 2 at step 5 (repair)" in run.output
    assert "dump of step 4 published" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    resumed = run_training(["--load", str(ckpt), "--enable-high-availability"]).require_success()
    reference, _ = reference_runs("ha")
    assert resumed.losses[5] == reference.losses[5]
    assert resumed.digest == reference.digest
