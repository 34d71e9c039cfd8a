"""Silent data corruption on the real megatron.training (dp4, R=2, gloo): one bit flipped at rest in rank 1's
optimizer shard after step 5 is found when the holders compare their shards before the checkpoint of step 6
is written; every rank reloads the checkpoint of step 3 online, steps 4 to 6 are computed again, the
recomputation names rank 1's copy as the corrupted one, and the run ends bit-identical to the
uninterrupted one."""
import re

import pytest

from mindio_adaptor.core.detection.offender_record import FILE_ENV, OffenderRecord
from mindio_adaptor.tiny.job import process_ids, run_training

pytestmark = pytest.mark.e2e
FLIP = "flip:rank=1,step=5,phase=completed"


@pytest.fixture(scope="module")
def corrupted_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sdc")
    flags = ["--enable-high-availability", "--enable-hbmfault-repair", "--save", str(tmp / "ckpt"),
             "--save-interval", "3"]
    env = {"MINDIO_FAULT_INJECT": FLIP, "MINDIO_FAULT_STATE_DIR": str(tmp / "faults"),
           FILE_ENV: str(tmp / "offenders.json")}
    run = run_training(flags, env=env).require_success()
    run.offenders = OffenderRecord(tmp / "offenders.json").incidents()
    return run


def test_the_flip_is_found_at_the_next_comparison_naming_the_holders(corrupted_run):
    out = corrupted_run.output
    assert re.search(r"rank 1\] WARNING fault injection: flipped bit 22 of element \d+ of shard tensor 0", out)
    assert re.search(r"silent data corruption found after step 6: the optimizer shard of ranks \[1, 3\]: "
                     r"1 of \d+ tensors differ \(positions \[0\]\)", out)
    assert "after step 3" not in out.split("flipped bit")[1].split("silent data corruption found")[0]


def test_every_rank_reloads_the_checked_checkpoint_online_and_recomputes(corrupted_run):
    out = corrupted_run.output
    assert re.search(r"decision retry: faults 0:memory 1:memory 2:memory 3:memory .*reload_step=3", out)
    assert len(re.findall(r"reloaded the checkpoint of step 3 from", out)) == 4
    assert "online reload finished at step 3" in out
    for rank, seen in process_ids(out).items():  # no process was restarted
        assert len(seen["starting"]) == 1 and seen["done"] == seen["starting"], (rank, seen)


def test_the_recomputation_names_the_corrupted_copy_and_its_host(corrupted_run):
    out = corrupted_run.output
    named = re.search(r"rank 1\] ERROR silent data corruption after step 6: this rank's copy of its optimizer "
                      r"shard was the corrupted one \(farthest from the recomputed values where the copies differ "
                      r"\(rank 1: (\S+), rank 3: (\S+)\)\); host \S+ is suspect", out)
    assert named and float(named[1]) >= 10 * float(named[2])
    assert re.search(r"rank 3\] WARNING silent data corruption after step 6, recomputed: the optimizer shard of "
                     r"ranks \[1, 3\]: the corrupted copy was rank\(s\) \[1\]'s", out)
    assert "rank 3] ERROR silent data corruption after step 6: this rank" not in out
    assert re.search(r"\[controller rank 0\] rank 1( \(node \S+\))? reported sub-health: MINDIO-SDC; training goes "
                     r"on, the rank is flagged sub-healthy", out)
    assert "rank 3 reported sub-health" not in out and "rank 3 (node" not in out


def test_the_offender_record_charges_the_corrupted_copy_and_not_the_job_wide_check(corrupted_run):
    # every rank raised SDC ERROR (a memory fault each): that names no node; rank 1's sub-health report does
    assert [(i.rank, i.what) for i in corrupted_run.offenders] == [(1, "sub-health MINDIO-SDC")]


def test_the_run_ends_as_the_uninterrupted_one(corrupted_run, reference_runs):
    reference, _ = reference_runs("ha")
    assert corrupted_run.losses == reference.losses
    assert sorted(corrupted_run.loss_line_steps) == list(range(1, 9))
    assert corrupted_run.digest == reference.digest
