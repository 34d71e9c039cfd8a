"""Pipeline parallelism in the recovery flows, on the real megatron.training (pp2 x dp2, R=2, gloo; stage 0
on ranks 0 and 1, stage 1 on ranks 2 and 3; each stage's data-parallel pair holds its optimizer state
twice). Each faulted run is checked against the uninterrupted one: an online repair ends bit-identical;
the dying-gasp dump (rank 1 killed: one holder per stage, ranks 0 and 2, saves) resumes with a stock --load bit-identical; and
elastic training on four one-rank launchers: node 3 (rank 3, stage 1 of data-parallel slice 1) is lost
after step 4, rank 1 leaves the job with its slice, ranks 0 and 2 go on at pp2 x dp1, then new launchers of
nodes 1 and 3 start and the job grows back to pp2 x dp2 at step 7 from the replicas, every loss within 1e-4
of the uninterrupted run's. That run also holds each stage at a step (the example's --hold-before-step)
while its neighbour waits in a receive, which once failed as a communication fault (core/abandonable_waits)."""
import re

import pytest

from fault_plan import fault_env
from mindio_adaptor.elastic_scenario import run_elastic
from mindio_adaptor.tiny_job import process_ids, run_training

pytestmark = pytest.mark.e2e
PP2 = ["--pipeline-model-parallel-size", "2"]
HA = ["--enable-high-availability", *PP2]


@pytest.fixture(scope="module")
def reference():
    return run_training(HA).require_success()


def test_online_repair_ends_bit_identical(tmp_path, reference):
    run = run_training([*HA, "--enable-hbmfault-repair"],
                       env=fault_env("raise:rank=1,step=5,msg=UCE ERROR injected", tmp_path)).require_success()
    assert "decision retry: faults 1:memory repair_step=4" in run.output
    assert re.search(r"rank 1\] INFO repair of step 4: received my optimizer shard \(\d+ tensors, \d+ bytes\) "
                     r"from rank 0", run.output)
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_the_dump_resumes_bit_identical(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    run = run_training([*HA, "--save", str(ckpt), "--save-interval", "1000"],
                       env=fault_env("kill:rank=1,step=5,phase=backward", tmp_path))
    assert run.returncode != 0 and "dump of step 4 published" in run.output
    assert "dump of step 4: saved my part (savers [0, 2]" in run.output
    resumed = run_training(["--load", str(ckpt), *HA]).require_success()
    assert sorted(resumed.losses) == list(range(5, 9))
    assert resumed.losses[5] == reference.losses[5]
    assert resumed.digest == reference.digest


def test_elastic_training_scales_in_and_out_like_the_uninterrupted_run(tmp_path, reference):
    run, lost = run_elastic(tmp_path / "elastic", lose_after=4, return_at=7, arf_wait_s=None, nproc_per_node=1,
                            lost_node=3, returning_nodes=(1, 3), flags=PP2)
    run.require_success()
    [left] = re.findall(r"elastic training: rank 1 leaves the job after step 4 [^\n]*", run.output)
    assert "dp2 -> dp1" in left, left
    [scaled_in] = re.findall(r"elastic training: scaled in dp2 -> dp1 [^\n]*", run.output)
    assert "survivors [0, 2]" in scaled_in, scaled_in
    assert "(state from the replicas in " in scaled_in, scaled_in  # each stage's state resharded in memory
    assert re.search(r"elastic training: scaled out dp1 -> dp2 \(ranks \[1, 3\] returned", run.output)
    seen = process_ids(run.output)
    for rank in (0, 2):  # one process from start to end
        assert len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"], seen
    assert sorted(run.losses) == list(range(1, 9))
    for step, loss in reference.losses.items():
        assert abs(run.losses[step] - loss) <= 1e-4 * abs(loss), (step, run.losses[step], loss)
