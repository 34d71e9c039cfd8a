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
