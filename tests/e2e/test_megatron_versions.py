"""The Megatron releases other than the installed one: those before the wheels carried megatron.training from the
Megatron-LM source trees in ../shared/megatron-lm (copied: Megatron builds its dataset helpers inside the tree),
the later ones from their wheels (downloaded by scripts/install_env.sh, unpacked). Per release, three runs of
the example (dp4, R=2, gloo): the uninterrupted one; one faulted run checked several ways (a UCE error on rank 1
in step 5 repaired online from its replica peer, then rank 2 killed in step 7's backward, the survivors' dying-gasp
checkpoint of step 6); and a stock --load of that checkpoint. The oracle is the uninterrupted run of the same
release: the same losses, and bit-identical final parameters (digests differ between releases)."""
import re
import sys
from pathlib import Path

import pytest

from mindio_adaptor.patches import megatron_versions
from mindio_adaptor.tiny_job import process_ids, run_training

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from megatron_releases import RELEASES, on_release, unpack  # noqa: E402

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
FAULTS = "raise:rank=1,step=5,msg=UCE ERROR injected;kill:rank=2,step=7,phase=backward"


@pytest.fixture(scope="module", params=sorted(RELEASES))
def release_runs(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"megatron_{request.param}")
    env = on_release(unpack(request.param, work / "tree"))
    reference = run_training(HA, env=env).require_success()
    ckpt = work / "ckpt"
    faulted = run_training([*HA, "--enable-hbmfault-repair", "--save", str(ckpt), "--save-interval", "1000"],
                           env={**env, "MINDIO_FAULT_INJECT": FAULTS, "MINDIO_FAULT_STATE_DIR": str(work / "faults")})
    resumed = run_training([*HA, "--load", str(ckpt)], env=env).require_success()
    return request.param, reference, faulted, resumed, ckpt


def test_every_rank_trains_the_release_of_the_tree(release_runs):
    release, reference, faulted, resumed, _ = release_runs
    assert megatron_versions.series_of(release) in megatron_versions.TESTED
    for run in (reference, faulted, resumed):
        ranks = re.findall(rf"rank (\d+)\] INFO megatron-core {re.escape(release)} at .*/tree: the patches serving",
                           run.output)
        assert sorted(set(ranks)) == ["0", "1", "2", "3"], run.output[-3000:]


def test_a_uce_error_is_repaired_online_from_the_replica_peer(release_runs):
    _, reference, faulted, _, _ = release_runs
    assert "decision retry: faults 1:memory repair_step=4" in faulted.output
    assert re.search(r"repair of step 4: received my optimizer shard \(\d+ tensors, \d+ bytes\) from rank 3",
                     faulted.output)
    assert "online repair finished at step 4" in faulted.output
    assert process_ids(faulted.output)[1]["starting"] and len(process_ids(faulted.output)[1]["starting"]) == 1
    # every step the faulted run completed has the uninterrupted run's loss, the repaired one included
    assert sorted(faulted.losses) == list(range(1, 7))
    assert all(faulted.losses[step] == reference.losses[step] for step in faulted.losses)


def test_the_survivors_dump_the_last_completed_step(release_runs):
    _, _, faulted, _, ckpt = release_runs
    assert faulted.returncode != 0
    assert "lost the connection of rank 2" in faulted.output
    assert "dump of step 6 published" in faulted.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "6"


def test_a_stock_load_of_the_dump_ends_as_the_uninterrupted_run(release_runs):
    _, reference, _, resumed, _ = release_runs
    assert sorted(resumed.losses) == [7, 8]
    assert resumed.losses[7] == reference.losses[7]  # the first line after a resume is exact
    assert resumed.digest == reference.digest
