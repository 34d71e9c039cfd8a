"""Every megatron-core release besides the installed one (tests/megatron_releases.py: 0.12.1 and 0.16.1 from the
Megatron-LM trees, 0.17.0 and 0.18.0 from their wheels), on the real megatron.training (dp4, R=2, gloo). Per release
up to four runs of the example: the uninterrupted one; one under `mindio-adaptor launch` with worker reboot,
checked several ways (a UCE error on rank 1 in step 3 repaired online from its replica peer, then rank 2 killed in
step 5 and replaced by a new process); and, for the Megatron-LM trees (DUMP_RELEASES below), one under torchrun
with --save where rank 2 is killed in step 5's backward (the survivors' dying-gasp checkpoint of step 4) and a
stock --load of that checkpoint. The oracle is the
uninterrupted run of the same release: the same losses, and bit-identical final parameters (digests differ
between releases).

Elastic training (two launchers as two nodes, node 1 lost after step 3 and back at step 6: dp4 -> dp2 -> dp4, every
loss within 1e-4 of the uninterrupted run's) runs for 0.12.1, the release furthest from the installed one, and for
every release with MINDIO_VERSION_TESTS_ELASTIC=all (docs/megatron_versions.md has what it measured): a fifth
run per release would cost CI three more minutes for code paths that 0.12.1 and the installed release bound. For
0.12.1 also a run with the ranks placed cyclically over two nodes, whose optimizer instances are re-laid across them."""
import os
import re
import sys
from pathlib import Path

import pytest

from mindio_adaptor.tiny.elastic import run_elastic
from mindio_adaptor.patches import megatron_versions
from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from megatron_releases import RELEASES, byte_compiled, on_release, unpack  # noqa: E402

pytestmark = pytest.mark.e2e
HA = ["--enable-high-availability"]
ONLINE = "raise:rank=1,step=3,msg=UCE ERROR injected;kill:rank=2,step=5"
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")
ELASTIC_RELEASES = set(RELEASES) if os.environ.get("MINDIO_VERSION_TESTS_ELASTIC") == "all" else {"0.12.1"}
# The dump and its stock resume: the Megatron-LM trees (0.12.1, 0.16.1), whose checkpoint code is furthest from the
# installed 0.19's, which the rest of the suite dumps and resumes with; 0.17.0 and 0.18.0 lie between them
# (MINDIO_VERSION_TESTS_DUMP=all: every release; two runs each, a minute and a half of CI for both).
DUMP_RELEASES = set(RELEASES) if os.environ.get("MINDIO_VERSION_TESTS_DUMP") == "all" else {"0.12.1", "0.16.1"}

# Ranks 0,2 on one node and 1,3 on another: the optimizer instances are re-laid across the nodes. 0.12.1 names
# the group across instances differently from every later release (one run, 20 s).
CYCLIC_RELEASES = {"0.12.1"}
CYCLIC_NODES = {"MINDIO_FAILURE_DOMAINS": "a,b,a,b"}


@pytest.fixture(scope="module", params=sorted(RELEASES))
def release_runs(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"megatron_{request.param}")
    env = on_release(byte_compiled(unpack(request.param, work / "tree")))
    runs = {"reference": run_training(HA, env=env).require_success()}
    runs["online"] = run_training([*HA, "--enable-hbmfault-repair", "--enable-worker-reboot"], launcher=LAUNCH,
                                  env={**env, "MINDIO_FAULT_INJECT": ONLINE,
                                       "MINDIO_FAULT_STATE_DIR": str(work / "online_faults")})
    ckpt = work / "ckpt"
    if request.param in DUMP_RELEASES:
        runs["dump"] = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"],
                                    env={**env, "MINDIO_FAULT_INJECT": "kill:rank=2,step=5,phase=backward",
                                         "MINDIO_FAULT_STATE_DIR": str(work / "dump_faults")})
        runs["resumed"] = run_training([*HA, "--load", str(ckpt)], env=env).require_success()
    if request.param in CYCLIC_RELEASES:
        runs["cyclic"] = run_training([*HA, "--verify-optimizer-replicas"], env={**env, **CYCLIC_NODES})
    if request.param in ELASTIC_RELEASES:
        runs["elastic"], _ = run_elastic(work / "elastic", lose_after=3, return_at=6, arf_wait_s=None, env=env)
    return request.param, runs, ckpt


def test_every_rank_trains_the_release_unpacked(release_runs):
    release, runs, _ = release_runs
    assert megatron_versions.series_of(release) in megatron_versions.TESTED
    for name, run in runs.items():
        ranks = re.findall(rf"rank (\d+)\] INFO megatron-core {re.escape(release)} at .*/tree: the patches serving",
                           run.output)
        assert sorted(set(ranks)) == ["0", "1", "2", "3"], (name, run.output[-3000:])


def test_a_uce_error_is_repaired_online_and_a_killed_rank_replaced(release_runs):
    _, runs, _ = release_runs
    online, reference = runs["online"].require_success(), runs["reference"]
    assert "decision retry: faults 1:memory repair_step=2" in online.output
    assert re.search(r"repair of step 2: received my optimizer shard \(\d+ tensors, \d+ bytes\) from rank 3",
                     online.output)
    assert "online repair finished at step 2" in online.output
    assert re.search(r"decision recover: faults [^\n]*\b2:node", online.output)
    assert "ranks [2] replaced, training resumes at step 4" in online.output
    seen = process_ids(online.output)
    for rank in (0, 1, 3):  # one process from start to end, the repaired rank 1 included
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[2]["starting"])) == 2, seen
    assert sorted(online.loss_line_steps) == list(range(1, 9))
    assert online.losses == reference.losses
    assert online.digest == reference.digest


def test_the_survivors_dump_the_last_completed_step(release_runs):
    _, runs, ckpt = release_runs
    if "dump" not in runs:
        pytest.skip(f"the dump runs for {sorted(DUMP_RELEASES)} (MINDIO_VERSION_TESTS_DUMP=all: every release)")
    dump = runs["dump"]
    assert dump.returncode != 0
    assert "lost the connection of rank 2" in dump.output
    assert "dump of step 4 published" in dump.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert all(dump.losses[step] == runs["reference"].losses[step] for step in dump.losses)


def test_a_stock_load_of_the_dump_ends_as_the_uninterrupted_run(release_runs):
    _, runs, _ = release_runs
    if "resumed" not in runs:
        pytest.skip(f"the dump runs for {sorted(DUMP_RELEASES)} (MINDIO_VERSION_TESTS_DUMP=all: every release)")
    resumed, reference = runs["resumed"], runs["reference"]
    assert sorted(resumed.losses) == [5, 6, 7, 8]
    assert resumed.losses[5] == reference.losses[5]  # the first line after a resume is exact
    assert resumed.digest == reference.digest


def test_the_job_scales_in_and_out_like_the_uninterrupted_run(release_runs):
    release, runs, _ = release_runs
    if "elastic" not in runs:
        pytest.skip(f"elastic training runs for {sorted(ELASTIC_RELEASES)} (MINDIO_VERSION_TESTS_ELASTIC=all: every "
                    f"release)")
    elastic, reference = runs["elastic"].require_success(), runs["reference"]
    assert "elastic training: scaled in dp4 -> dp2" in elastic.output
    assert "elastic training: scaled out dp2 -> dp4" in elastic.output
    assert sorted(elastic.losses) == list(range(1, 9))
    assert all(elastic.losses[step] == reference.losses[step] for step in (1, 2, 3))  # before the node was lost
    for step, loss in reference.losses.items():
        assert elastic.losses[step] == pytest.approx(loss, rel=1e-4), (release, step, elastic.losses[step], loss)


def test_a_cyclic_node_placement_re_lays_the_optimizer_instances(release_runs):
    _, runs, _ = release_runs
    if "cyclic" not in runs:
        pytest.skip(f"the cyclic placement runs for {sorted(CYCLIC_RELEASES)}")
    cyclic, reference = runs["cyclic"].require_success(), runs["reference"]
    assert "optimizer instances re-laid so each shard's holders are on different nodes: [[(0, 2), (1, 3)]]" in cyclic.output
    for step in range(1, 9):
        assert f"step {step}: every optimizer shard identical on its 2 holders" in cyclic.output
        assert cyclic.losses[step] == pytest.approx(reference.losses[step], rel=1e-5)
