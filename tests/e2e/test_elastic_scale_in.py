"""Elastic training's scale-in on the real megatron.training (dp4, R=2, gloo): two `mindio-adaptor launch`
processes play two nodes of two ranks each. Node 1 is lost in step 5 and no replacement comes: once
the controller stops waiting (MINDIO_ARF_WAIT_S) the savers on node 0 write the dump of the repair step,
node 0's two ranks rebuild the world among themselves at dp2, load that dump in-process and train on to
the last step with twice the micro-batches each. One faulted run, checked several ways against the
uninterrupted dp4 run: losses, consumed samples, the samples of every step, node 0's processes, the log.
The checkpoint the run saves at dp2 (step 6) is then loaded by two short plain runs, one at dp4 and one
at dp2, which train steps 7 and 8 like the uninterrupted run.

A second faulted run: tp2 x dp2 (one data-parallel slice, both its TP ranks, per node), node 1 lost in
step 5: node 0's two TP ranks go on at dp1, the optimizer's R=2 replicas fall to none."""
import re
import threading
from collections import defaultdict

import pytest

from mindio_adaptor.tiny_job import LocalCluster, process_ids, run_training

pytestmark = pytest.mark.e2e
FLAGS = ["--enable-high-availability", "--enable-worker-reboot", "--enable-elastic-training", "--log-sample-ids"]
ARF_WAIT_S = "15"  # how long the controller waits for node 1's replacement before scaling in
LAST_STEP = 8
SAVED_AT_DP2 = 6  # --save-interval: a checkpoint written after the scale-in, while at dp2
SAMPLE_IDS = re.compile(r"sample ids step (\d+) rank \d+: ([\d,-]+)")
CONSUMED = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?consumed samples:\s+(\d+)")


def samples_by_step(output: str) -> dict:
    seen = defaultdict(set)
    for step, ids in SAMPLE_IDS.findall(output):
        seen[int(step)].update(ids.split(","))
    return dict(seen)


def consumed_by_step(output: str) -> dict:
    return {int(step): int(samples) for step, samples in CONSUMED.findall(output)}


@pytest.fixture(scope="module")
def scaled_in(tmp_path_factory):
    """Node 1 lost in step 5, never replaced: the job goes on at dp2 from step 4."""
    ckpt = tmp_path_factory.mktemp("elastic") / "ckpt"
    run, lost = lose_node_1_in_step_5(["--save-interval", str(SAVED_AT_DP2)], ckpt)
    return run, lost, ckpt


class HangFired:
    """Set when the injected hang of a rank of node 1 fires: the job is inside that step, whatever its speed
    (a kill on step 4's log line once landed after the tp2 x dp2 job had run to its end, 1.3 s later)."""

    def __init__(self):
        self.event = threading.Event()

    def __call__(self, line):
        if "fault injection: firing" in line:
            self.event.set()

    def wait(self, cluster):
        cluster.wait_for(self.event, "the injected hang")


def lose_node_1_in_step_5(flags, ckpt):
    """Rank 2 (node 1) hangs in step 5 (injected), then node 1 is SIGKILLed: the loss lands inside step 5
    whatever the job's speed."""
    fired = HangFired()
    env = {"MINDIO_ARF_WAIT_S": ARF_WAIT_S, "MINDIO_FAULT_INJECT": "hang:rank=2,step=5",
           "MINDIO_FAULT_STATE_DIR": str(ckpt.parent / "faults")}
    cluster = LocalCluster([*FLAGS, *flags, "--save", str(ckpt)], env=env, on_line=fired)
    cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    fired.wait(cluster)
    lost = cluster.lose_node(node_1)
    run = cluster.wait()
    (ckpt.parent / "output.txt").write_text(run.output)  # the whole log, kept with the test's files
    return run, lost


@pytest.fixture(scope="module", params=[4, 2], ids=["dp4", "dp2"])
def resumed(request, scaled_in):
    """A plain run (no adaptor flags) at dp4 or dp2 loading the checkpoint saved at dp2 and training to the
    last step."""
    run, _, ckpt = scaled_in
    run.require_success()
    return request.param, run_training(["--load", str(ckpt), "--ckpt-step", str(SAVED_AT_DP2), "--log-sample-ids"],
                                       nproc=request.param)


@pytest.fixture(scope="module")
def reference(reference_runs, tmp_path_factory):
    """The uninterrupted dp4 run (its sample ids logged: tests/e2e/conftest.py)."""
    run, _ = reference_runs("ha")
    (tmp_path_factory.mktemp("reference") / "output.txt").write_text(run.output)  # beside the faulted run's
    return run


def test_the_job_ends_at_the_last_step_on_dp2(scaled_in):
    run, _, _ = scaled_in
    run.require_success()
    assert max(run.losses) == LAST_STEP
    assert re.search(rf"iteration\s+{LAST_STEP}/", run.output)


def test_losses_match_the_uninterrupted_run(scaled_in, reference):
    run, _, _ = scaled_in
    assert set(run.losses) >= set(range(1, LAST_STEP + 1)), sorted(run.losses)
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step


def test_every_step_sees_the_same_samples_and_the_same_count(scaled_in, reference):
    run, _, _ = scaled_in
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    assert sorted(expected) == list(range(1, LAST_STEP + 1))
    assert all(len(ids) == 16 for ids in expected.values())  # the global batch size: distinct samples
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    assert consumed_by_step(run.output)[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP


def test_node_0_keeps_its_processes(scaled_in):
    run, lost, _ = scaled_in
    seen = process_ids(run.output)
    for rank in (0, 1):
        assert len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"], seen
    for rank in (2, 3):
        assert "done" not in seen.get(rank, {}), seen


def test_the_log_names_the_scale_in(scaled_in):
    run, _, _ = scaled_in
    lines = re.findall(r"elastic training: scaled in dp4 -> dp2 [^\n]*", run.output)
    assert len(lines) == 1, run.output[-6000:]
    assert re.search(r"after step \d+ at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ranks \[2, 3\] were lost and not "
                     r"replaced within MINDIO_ARF_WAIT_S", lines[0])
    assert re.search(r"elastic training: scaling in without ranks \[2,3\] after step \d+ \(process replacement "
                     r"timed out", run.output)


def test_the_checkpoint_saved_at_dp2_loads_at_dp4_and_at_dp2(resumed, reference):
    nproc, run = resumed
    run.require_success()
    assert re.search(rf"successfully loaded checkpoint from \S+ \[[^\]]*\] at iteration "
                     rf"{SAVED_AT_DP2}\b", run.output), run.output[-6000:]
    steps = range(SAVED_AT_DP2 + 1, LAST_STEP + 1)
    assert sorted(run.losses) == list(steps), sorted(run.losses)
    consumed = consumed_by_step(run.output)
    assert consumed[SAVED_AT_DP2 + 1] == 16 * (SAVED_AT_DP2 + 1), consumed  # 16 per step before it, not 16/dp
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    for step in steps:
        assert got[step] == expected[step], (nproc, step)
    first, second = steps[0], steps[1]
    assert run.losses[first] == pytest.approx(reference.losses[first], rel=1e-4), nproc
    # Megatron does not reset its loss sums on the first log after a resume (tests/e2e/
    # test_checkpoint_interop.py): the second step's printed loss is the mean of both.
    mean = (reference.losses[first] + reference.losses[second]) / 2
    assert run.losses[second] == pytest.approx(mean, rel=1e-4), nproc


@pytest.fixture(scope="module")
def tp2_scaled_in(tmp_path_factory):
    """tp2 x dp2, node 1 (data-parallel index 1: ranks 2 and 3) lost in step 5 (rank 2 hangs there, then the
    node is killed): the job goes on at dp1."""
    run, _ = lose_node_1_in_step_5(["--tensor-model-parallel-size", "2", "--save-interval", "1000"],
                                   tmp_path_factory.mktemp("elastic_tp2") / "ckpt")
    return run


def test_tp2_dp2_goes_on_at_dp1_like_the_uninterrupted_run(tp2_scaled_in, reference_runs):
    run = tp2_scaled_in.require_success()
    reference, _ = reference_runs("ha_tp2")
    assert set(run.losses) >= set(range(1, LAST_STEP + 1)), sorted(run.losses)
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    assert sorted(expected) == list(range(1, LAST_STEP + 1))
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    assert consumed_by_step(run.output)[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP
    seen = process_ids(run.output)
    for rank in (0, 1):
        assert len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"], seen


def test_tp2_the_log_names_dp1_and_the_replicas_gone(tp2_scaled_in):
    lines = re.findall(r"elastic training: scaled in dp2 -> dp1 [^\n]*", tp2_scaled_in.output)
    assert len(lines) == 1, tp2_scaled_in.output[-6000:]
    assert "survivors [0, 1], 8 micro-batches each" in lines[0]
    assert "optimizer replicas R=2 -> R=1: the job has no replica now, its next fault ends in the dump" in lines[0]
