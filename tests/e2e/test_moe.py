"""Mixture of experts with expert parallelism in the recovery flows, on the real megatron.training (dp4,
R=2, gloo, 4 experts, EP 2, top-2 routing). The replica layout has one dense optimizer (instances (0, 1)
and (2, 3)) and one expert optimizer per expert-parallel rank ((0, 2) and (1, 3), one shard each). Each
faulted run is checked against the uninterrupted one: an online repair and a process replacement (by a
warm spare) end bit-identical; the dying-gasp dump, written by savers of both instances (rank 1 killed: ranks 0 and 3
save), holds the dense and the expert shards in Megatron's format, and a stock --load of it ends
bit-identical. Elastic training on two launchers of two ranks: node 1 lost after step 4, the job scales in
to dp2 (EP 2 kept, R=1), node 1 returns and the job scales out to dp4 at step 7, both resizes from the
replicas in memory (the experts' state within the expert data-parallel groups), every loss within 1e-4 of the
uninterrupted run's."""
import re

import pytest

from fault_plan import fault_env
from mindio_adaptor.tiny.elastic import run_elastic
from mindio_adaptor.tiny.job import process_ids, run_training

pytestmark = pytest.mark.e2e
MOE = ["--num-experts", "4", "--expert-model-parallel-size", "2", "--moe-router-topk", "2"]
HA = ["--enable-high-availability", *MOE]


@pytest.fixture(scope="module")
def reference():
    return run_training(HA).require_success()


def test_the_layout_has_an_expert_optimizer_per_expert_parallel_rank(reference):
    assert ("replica layout: [ReplicaSet(type=0, groups=[(0, 1), (2, 3)], R=2), ReplicaSet(type=1, groups=[(0,), "
            "(2,)], R=2), ReplicaSet(type=1, groups=[(1,), (3,)], R=2)]") in reference.output


def test_online_repair_ends_bit_identical(tmp_path, reference):
    run = run_training([*HA, "--enable-hbmfault-repair"],
                       env=fault_env("raise:rank=1,step=5,msg=UCE ERROR injected", tmp_path)).require_success()
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert re.search(r"rank 1\] INFO repair of step 4: received my optimizer shard \(\d+ tensors, \d+ bytes\) "
                     r"from rank 3", run.output)
    assert sorted(run.loss_line_steps) == list(range(1, 9))
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_process_replacement_by_a_warm_spare_ends_bit_identical(tmp_path, reference):
    # With expert parallelism a stand-in rank's model is not every rank's (its experts are its expert-parallel
    # rank's), so the spare takes its rank once Megatron parsed its arguments, before the world and the model.
    run = run_training(["--enable-worker-reboot", *HA], env=fault_env("kill:rank=3,step=4", tmp_path),
                       launcher=("mindio_adaptor.launch", "--max-restarts", "1", "--spare-workers", "1"))
    run.require_success()
    assert re.search(r"worker reboot: rank 3 started again alone as pid \d+, a warm spare", run.output)
    assert re.search(r"takes rank 3 after [\d.]+ s warm \(arguments parsed\)", run.output)
    assert "ranks [3] replaced, training resumes at step 3" in run.output
    seen = process_ids(run.output)
    assert len(set(seen[3]["starting"])) == 2, seen
    assert run.losses == reference.losses
    assert run.digest == reference.digest


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("moe_dump")
    ckpt = workdir / "ckpt"
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"],
                       env=fault_env("kill:rank=1,step=5,phase=backward", workdir))
    return run, ckpt


def test_the_dump_is_saved_by_both_instances_and_names_the_expert_shards(dumped):
    run, ckpt = dumped
    assert run.returncode != 0
    assert "dump of step 4: saved my part (savers [0, 3]" in run.output  # shard 1's saver is instance 1's
    assert "dump of step 4 published" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    metadata = (ckpt / "iter_0000004" / ".metadata").read_bytes()
    assert b"decoder.layers.mlp.experts.experts.linear_fc1.weight" in metadata


def test_a_stock_load_of_the_dump_ends_bit_identical(dumped, reference):
    _, ckpt = dumped
    resumed = run_training(["--load", str(ckpt), *HA]).require_success()
    assert sorted(resumed.losses) == list(range(5, 9))
    assert resumed.losses[5] == reference.losses[5]  # later lines average two steps after a resume
    assert resumed.digest == reference.digest


def test_elastic_training_scales_in_and_out_like_the_uninterrupted_run(tmp_path, reference):
    run, _ = run_elastic(tmp_path / "elastic", lose_after=4, return_at=7, arf_wait_s=None, flags=MOE)
    run.require_success()
    [scaled_in] = re.findall(r"elastic training: scaled in dp4 -> dp2 [^\n]*", run.output)
    assert "optimizer replicas R=2 -> R=1" in scaled_in, scaled_in  # dp2 / EP2: one expert data-parallel rank
    assert "(state from the replicas in " in scaled_in, scaled_in
    [scaled_out] = re.findall(r"elastic training: scaled out dp2 -> dp4 \(ranks \[2, 3\] returned[^\n]*", run.output)
    assert "(state from the replicas in " in scaled_out, scaled_out
    assert "dump of step 4: saved" not in run.output and "scale-out: checkpoint of step" not in run.output
    assert sorted(run.losses) == list(range(1, 9))
    for step, loss in reference.losses.items():
        assert abs(run.losses[step] - loss) <= 1e-4 * abs(loss), (step, run.losses[step], loss)
