"""Pipeline parallelism in the recovery flows, on the real megatron.training (pp2 x dp2, R=2, gloo; stage 0
on ranks 0 and 1, stage 1 on ranks 2 and 3; each stage's data-parallel pair holds its optimizer state
twice), once with one model chunk per stage and once interleaved (a virtual pipeline: 4 layers, one per
chunk, two chunks per stage, so train() gets a model and a data iterator per chunk). Each faulted run is
checked against the uninterrupted one of its layout: under `mindio-adaptor launch` a UCE error on rank 1 in
step 3 repaired online from rank 0, then rank 2 killed in step 5 and replaced by a new process, ending
bit-identical; the dying-gasp dump (rank 1 killed: one holder per stage, ranks 0 and 2, saves) resumes with a
stock --load bit-identical; and elastic training on four one-rank launchers: node 3 (rank 3, stage 1 of
data-parallel slice 1) is lost after step 4, rank 1 leaves the job with its slice, ranks 0 and 2 go on at
pp2 x dp1 (each stage's state resharded in memory), then new launchers of nodes 1 and 3 start and the job
grows back to pp2 x dp2 at step 7 from the replicas, every loss within 1e-4 of the uninterrupted run's.
That run also holds each stage at a step (the example's --hold-before-step) while its neighbour waits in a
receive, which once failed as a communication fault (core/communication/abandonable_waits). Context parallelism is not
here: Megatron's local attention refuses it (only Transformer Engine's attention splits the sequence), and
Transformer Engine does not run on a CPU."""
import re

import pytest

from fault_plan import fault_env
from mindio_adaptor.tiny.elastic import run_elastic
from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
LAYOUTS = {"pp2": ["--pipeline-model-parallel-size", "2"],
           "pp2_interleaved": ["--pipeline-model-parallel-size", "2", "--num-layers", "4",
                               "--num-layers-per-virtual-pipeline-stage", "1"]}
ONLINE_THEN_KILLED = "raise:rank=1,step=3,msg=UCE ERROR injected;kill:rank=2,step=5"
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")
HA = ["--enable-high-availability"]


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def layout(request):
    """The layout's flags, and its uninterrupted run."""
    flags = LAYOUTS[request.param]
    return flags, run_training([*HA, *flags]).require_success()


def test_online_repair_then_process_replacement_end_bit_identical(tmp_path, layout):
    flags, reference = layout
    run = run_training([*HA, *flags, "--enable-hbmfault-repair", "--enable-worker-reboot"], launcher=LAUNCH,
                       env=fault_env(ONLINE_THEN_KILLED, tmp_path)).require_success()
    assert "decision retry: faults 1:memory repair_step=2" in run.output
    assert re.search(r"rank 1\] INFO repair of step 2: received my optimizer shard \(\d+ tensors, \d+ bytes\) "
                     r"from rank 0", run.output)
    assert re.search(r"decision recover: faults [^\n]*\b2:node", run.output)
    assert "ranks [2] replaced, training resumes at step 4" in run.output
    seen = process_ids(run.output)
    for rank in (0, 1, 3):  # one process from start to end
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[2]["starting"])) == 2, seen
    assert run.losses == reference.losses
    assert run.digest == reference.digest


def test_the_dump_resumes_bit_identical(tmp_path, layout):
    flags, reference = layout
    ckpt = tmp_path / "ckpt"
    run = run_training([*HA, *flags, "--save", str(ckpt), "--save-interval", "1000"],
                       env=fault_env("kill:rank=1,step=5,phase=backward", tmp_path))
    assert run.returncode != 0 and "dump of step 4 published" in run.output
    assert "dump of step 4: saved my part (savers [0, 2]" in run.output
    resumed = run_training(["--load", str(ckpt), *HA, *flags]).require_success()
    assert sorted(resumed.losses) == list(range(5, 9))
    assert resumed.losses[5] == reference.losses[5]
    assert resumed.digest == reference.digest


def test_elastic_training_scales_in_and_out_like_the_uninterrupted_run(tmp_path, layout):
    flags, reference = layout
    run, lost = run_elastic(tmp_path / "elastic", lose_after=4, return_at=7, arf_wait_s=None, nproc_per_node=1,
                            lost_node=3, returning_nodes=(1, 3), flags=flags)
    run.require_success()
    [left] = re.findall(r"elastic training: rank 1 leaves the job after step 4 [^\n]*", run.output)
    assert "dp2 -> dp1" in left, left
    [scaled_in] = re.findall(r"elastic training: scaled in dp2 -> dp1 [^\n]*", run.output)
    assert "survivors [0, 2]" in scaled_in, scaled_in
    assert "(state from the replicas in " in scaled_in, scaled_in  # each stage's state resharded in memory
    assert re.search(r"elastic training: scaled out dp1 -> dp2 \(ranks \[1, 3\] returned", run.output)
    seen = process_ids(run.output)
    for rank in (0, 2):  # one process from start to end
        assert kept_one_process(seen, rank), seen
    assert sorted(run.losses) == list(range(1, 9))
    for step, loss in reference.losses.items():
        assert abs(run.losses[step] - loss) <= 1e-4 * abs(loss), (step, run.losses[step], loss)
