"""Holders of expert shards spread over nodes (MoE, EP 2, dp8, R=2, on the real megatron.training with gloo).

Ranks 0,1 and 4,5 on node a, 2,3 and 6,7 on node b (MINDIO_FAILURE_DOMAINS): Megatron's own optimizer
instances, ranks 0-3 and 4-7, would put both holders of every dense and every expert shard on one node,
so losing either node would lose shards with no copy left. The adaptor lays the instances out over whole
expert slices instead, (0,1,4,5) and (2,3,6,7), for the dense and the expert optimizers at once. Checked:
the training matches the one on Megatron's instances (same losses within 1e-5), every shard stays
identical on its two holders, and when node b (ranks 2, 3, 6, 7) is killed in one step, node a's ranks
save the dying-gasp checkpoint, which a stock --load resumes bit-identical."""
import pytest

from fault_plan import fault_env
from mindio_adaptor.tiny.job import run_training

pytestmark = pytest.mark.e2e
MOE = ["--num-experts", "4", "--expert-model-parallel-size", "2", "--moe-router-topk", "2"]
HA = ["--enable-high-availability", *MOE]
TWO_NODES = {"MINDIO_FAILURE_DOMAINS": "a,a,b,b,a,a,b,b"}
NODE_B = (2, 3, 6, 7)


def run_dp8(flags, env=None):
    return run_training(flags, nproc=8, timeout=400, env=env)


@pytest.fixture(scope="module")
def on_megatrons_instances():
    return run_dp8(HA).require_success()


@pytest.fixture(scope="module")
def spread():
    return run_dp8([*HA, "--verify-optimizer-replicas"], env=TWO_NODES).require_success()


@pytest.fixture(scope="module")
def node_b_lost(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("moe_node_b_lost")
    ckpt = workdir / "ckpt"
    kills = ";".join(f"kill:rank={rank},step=5,phase=backward" for rank in NODE_B)
    run = run_dp8([*HA, "--save", str(ckpt), "--save-interval", "1000"], env={**TWO_NODES, **fault_env(kills, workdir)})
    return run, ckpt


def test_megatrons_instances_would_crowd_each_node(on_megatrons_instances):
    assert ("replica layout: [ReplicaSet(type=0, groups=[(0, 1, 2, 3), (4, 5, 6, 7)], R=2), "
            "ReplicaSet(type=1, groups=[(0, 2), (4, 6)], R=2)") in on_megatrons_instances.output


def test_the_instances_are_laid_over_whole_expert_slices_on_both_nodes(spread):
    assert ("optimizer instances re-laid so each shard's holders are on different nodes: "
            "[[(0, 1, 4, 5), (2, 3, 6, 7)], [(0, 4), (2, 6)], [(1, 5), (3, 7)]]") in spread.output
    assert "several holders on one node" not in spread.output
    assert "could be spread over nodes" not in spread.output


def test_the_spread_instances_train_as_megatrons_own(spread, on_megatrons_instances):
    for step in range(1, 9):
        assert f"step {step}: every optimizer shard identical on its 2 holders" in spread.output
        assert spread.losses[step] == pytest.approx(on_megatrons_instances.losses[step], rel=1e-5)


def test_losing_node_b_leaves_node_a_to_save_every_shard(node_b_lost):
    run, ckpt = node_b_lost
    assert run.returncode != 0
    assert "dump of step 4: saved my part (savers [0, 1, 4, 5]" in run.output
    assert "dump of step 4 published" in run.output
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert b"decoder.layers.mlp.experts.experts.linear_fc1.weight" in (ckpt / "iter_0000004" / ".metadata").read_bytes()


def test_a_stock_load_of_node_as_dump_ends_bit_identical(node_b_lost, spread):
    _, ckpt = node_b_lost
    resumed = run_dp8([*HA, "--verify-optimizer-replicas", "--load", str(ckpt)], env=TWO_NODES).require_success()
    assert sorted(resumed.losses) == list(range(5, 9))
    assert resumed.losses[5] == spread.losses[5]
    assert resumed.digest == spread.digest
