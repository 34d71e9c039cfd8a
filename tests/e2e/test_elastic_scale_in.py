"""Elastic training's scale-in on the real megatron.training (dp4, R=2, gloo): two `mindio-adaptor launch`
processes play two nodes of two ranks each. Node 1 is lost after step 4 and nothing replaces it: node 0's
launcher proves its launcher gone and no standby waits, so the controller stops waiting for a replacement
at once (the first run leaves MINDIO_ARF_WAIT_S at its default, 600 s); node 0's two ranks rebuild the world
among themselves at dp2, reshard the optimizer state they hold between them in memory (no dump written:
--elastic-scale-in-from replicas, the default) and train on to the last step with twice the micro-batches each (step 5 waits until node 1 is lost: the example's
--hold-before-step, mindio_adaptor/tiny/elastic). A second run does the same, and then node 1 returns: a
new launcher of node 1 starts once the job scaled in, and step 7 waits for its ranks (the example's
--hold-before-step), so the controller scales the job out to dp4 there and it ends on dp4. Each faulted
run is checked several ways against the uninterrupted dp4 run: losses, consumed samples, the samples of
every step, node 0's processes, the log. The scale-in run also saves
a checkpoint at dp2 (step 6), which two short plain runs load, one at dp4 and one at dp2. A third faulted
run: tp2 x dp2 on four one-rank nodes (TP pairs (0, 1) and (2, 3)), node 3 lost: rank 2, alive, leaves the job
with its data-parallel slice (exit 87, its launcher ends 0), ranks 0 and 1 go on at dp1, and the optimizer's
R=2 replicas fall to none; then new launchers of nodes 2 and 3 start, and the job grows back to tp2 x dp2
with R=2 at step 7 (that run takes both resizes through a checkpoint: --elastic-scale-in-from and
--elastic-scale-out-from checkpoint). A fourth: a second loss while scaled in (rank 1's
process killed during step 6 at dp2): no process replacement at the smaller size, so the job scales in again,
to dp1 (R=1), and rank 0 trains step 6 alone; then an error on rank 0 during step 7, which no scale-in can
answer: the controller, which learned the layout at dp1, has rank 0 save the dump of step 6 and the job ends;
a plain run loads that dump at dp4 and trains to the last step like the uninterrupted run. Its twin takes the
same two losses and then grows back: node 1 returns and rank 1, started again by its launcher, is back too, so
the job scales out from dp1 to dp4 at step 7 and ends like the uninterrupted run. A fifth: dp4 on four one-rank nodes, node 1 (rank 1) lost: the three survivors share
each step's 8 micro-batches unevenly (3, 3, 2, their losses weighted by their shares) and train like the
uninterrupted run; then node 1 returns and the job grows back from dp3 to dp4 at step 7, the uneven pieces
undone (2 micro-batches each, no weight), and ends like the uninterrupted run."""

import contextlib
import io
import re
from collections import defaultdict

import pytest
from fault_plan import fault_env

from mindio_adaptor.cli import build_parser, demo
from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER
from mindio_adaptor.tiny.elastic import run_elastic, samples_by_step
from mindio_adaptor.launch import lifeline
from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
ARF_WAIT_S = 15  # the longest the controller would wait for node 1's replacement (it is told none comes)
# (The scale-out's wait for the returned ranks is its own, MINDIO_SCALE_OUT_WAIT_S: mindio_adaptor/tiny/elastic.)
LOST_DURING_STEP = 5  # node 1 is lost after step 4, while the job holds before step 5
RETURN_AT_STEP = 7
# How long the controller waits for node 1 once the killed rank 1 returned before it grows without node 1: the
# returned rank must be ready by then (its start-up takes seconds, forked from the launcher's template).
PARTIAL_SCALE_OUT_WAIT_S = "20"
NOTHING_TAKES_NODE_1 = f"node 1 is lost ({lifeline.EVIDENCE}) and no standby waits to take its place"
LAST_STEP = 8
SAVED_AT_DP2 = 6  # --save-interval of the scale-in run: a checkpoint written after the scale-in, at dp2
CONSUMED = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?consumed samples:\s+(\d+)")
# The scale-in run evaluates (2 batches after steps 3 and 6, and after training): at dp2 each rank's validation loader
# is started again where the evaluations left off, with its new data-parallel rank and size.
EVALUATION = ["--eval-iters", "2", "--eval-interval", "3"]
VALIDATION = re.compile(r"validation loss at iteration (\d+)( on \w+ set)? \| lm loss value: (\S+)")
LEARNING_RATE = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?learning rate: ([\d.E+-]+) \|.*?global batch size:\s+(\d+)")


def consumed_by_step(output: str) -> dict:
    return {int(step): int(samples) for step, samples in CONSUMED.findall(output)}


def learning_rates_and_batch(output: str) -> dict:
    return {int(step): (rate, int(batch)) for step, rate, batch in LEARNING_RATE.findall(output)}


def ranks_by_step(output: str) -> dict:
    """step -> the rank of each micro-batch line (--log-sample-ids), one entry per micro-batch and rank."""
    seen = defaultdict(list)
    for step, rank in re.findall(r"sample ids step (\d+) rank (\d+):", output):
        seen[int(step)].append(int(rank))
    return seen


@pytest.fixture(scope="module")
def scaled_in_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("elastic")


@pytest.fixture(scope="module")
def scaled_in(scaled_in_dir):
    """Node 1 lost after step 4, never replaced: the job goes on at dp2 (and saves at step 6). The wait for a
    replacement is left at its default, 600 s, longer than the run may take."""
    return run_elastic(scaled_in_dir, lose_after=4, arf_wait_s=None,
                       flags=["--save-interval", str(SAVED_AT_DP2), *EVALUATION])


@pytest.fixture(scope="module")
def demo_of_the_scale_out(tmp_path_factory, reference):
    """`mindio-adaptor demo --scenario elastic --steps 8 --fault-step 5`: its arguments parsed by the CLI's own
    parser and the scenario run by the demo's own code (cli/demo.elastic, what the command runs after its
    reference run), in this process, with this module's reference in place of the demo's (the same flags,
    trained once per session). The run is scaled_in's, then node 1 returns: a new launcher of node 1 starts
    once the job scaled in, and the survivors' step 7 waits until the controller decides the scale-out
    (mindio_adaptor/tiny/elastic). Returns what the demo printed, its exit code, the run and the pids lost
    with node 1."""
    workdir = tmp_path_factory.mktemp("elastic_out")
    args = build_parser().parse_args(["demo", "--scenario", "elastic", "--steps", str(LAST_STEP), "--fault-step",
                                      str(LOST_DURING_STEP), "--workdir", str(workdir), "--timeout", "400"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code, run, lost = demo.elastic(args, demo.Timeline(), reference, workdir)
    (workdir / "demo_output.txt").write_text(printed.getvalue())
    return printed.getvalue(), code, run, lost


@pytest.fixture(scope="module")
def scaled_out(demo_of_the_scale_out):
    """The demo's run: as scaled_in, then node 1 returns and the job scales out to dp4 at step 7."""
    _, _, run, lost = demo_of_the_scale_out
    return run, lost


@pytest.fixture(params=["scaled_in", "scaled_out"])
def elastic_run(request):
    """Each faulted run, for the checks they share."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def reference(reference_runs, tmp_path_factory):
    """The uninterrupted dp4 run (its sample ids logged: tests/e2e/conftest.py)."""
    run, _ = reference_runs("ha")
    (tmp_path_factory.mktemp("reference") / "output.txt").write_text(run.output)  # beside the faulted run's
    return run


def test_the_job_ends_at_the_last_step_on_dp2(scaled_in):
    run, _ = scaled_in
    run.require_success()
    assert max(run.losses) == LAST_STEP
    assert re.search(rf"iteration\s+{LAST_STEP}/", run.output)


def test_losses_match_the_uninterrupted_run(elastic_run, reference):
    run, _ = elastic_run
    assert sorted(run.loss_line_steps) == list(range(1, LAST_STEP + 1)), run.loss_line_steps  # once each
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step


def test_every_step_sees_the_same_samples_and_the_same_count(elastic_run, reference):
    run, _ = elastic_run
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    assert sorted(expected) == list(range(1, LAST_STEP + 1))
    assert all(len(ids) == 16 for ids in expected.values())  # the global batch size: distinct samples
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    assert consumed_by_step(run.output)[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP


def test_the_evaluations_at_dp2_see_the_samples_of_the_uninterrupted_runs(scaled_in, reference_runs):
    run, _ = scaled_in
    reference, _ = reference_runs("ha_eval")
    got, expected = VALIDATION.findall(run.output), VALIDATION.findall(reference.output)
    assert [line[:2] for line in got] == [line[:2] for line in expected] == [
        ("3", ""), ("6", ""), ("8", " on validation set"), ("8", " on test set")]
    for (step, which, loss), (_, _, reference_loss) in zip(got, expected):
        assert float(loss) == pytest.approx(float(reference_loss), rel=1e-4), (step, which)
    positioned = re.findall(r"rank (\d+)\] INFO scale-in at step (\d+): (\w+) data iterator positioned at sample "
                            r"(\d+)", run.output)
    # the train loaders at step 4's samples; the validation loaders after step 3's evaluation (2 batches of 16);
    # the test loaders, read after training, at their start
    assert sorted(positioned) == [(rank, "4", which, sample) for rank in ("0", "1") for which, sample in
                                  (("test", "0"), ("train", "64"), ("validation", "32"))]


def test_node_0_keeps_its_processes(elastic_run):
    run, lost = elastic_run
    seen = process_ids(run.output)
    for rank in (0, 1):
        assert kept_one_process(seen, rank), seen


def test_node_1_ends_lost_or_returned(scaled_in, scaled_out):
    run, _ = scaled_in
    seen = process_ids(run.output)
    for rank in (2, 3):
        assert "done" not in seen.get(rank, {}), seen
    run, lost = scaled_out
    seen = process_ids(run.output)
    for rank in (2, 3):  # one process lost with node 1, the returned one finished the run
        gone, last = seen[rank]["starting"]
        assert gone in lost and seen[rank]["done"] == [last], (seen, lost)


def test_the_scaled_out_job_ends_on_dp4(scaled_out):
    run, _ = scaled_out
    run.require_success()
    assert max(run.losses) == LAST_STEP
    by_step = ranks_by_step(run.output)
    # dp4: two micro-batches on each of the four ranks; at dp2 four on each of two
    assert sorted(by_step[LAST_STEP]) == [0, 0, 1, 1, 2, 2, 3, 3], by_step[LAST_STEP]
    assert sorted(by_step[RETURN_AT_STEP - 1]) == [0] * 4 + [1] * 4, by_step[RETURN_AT_STEP - 1]


def test_the_log_names_the_scale_in(scaled_in):
    run, _ = scaled_in
    lines = re.findall(r"elastic training: scaled in dp4 -> dp2 [^\n]*", run.output)
    assert len(lines) == 1, run.output[-6000:]
    assert re.search(r"after step \d+ at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ranks \[2, 3\] were lost and not "
                     r"replaced; training goes on", lines[0])
    decided = re.findall(r"elastic training: scaling in without ranks \[2,3\] after step \d+ \(([^\n]*)\)\n",
                         run.output)
    assert decided == [f"ranks [2,3] will not be replaced: {NOTHING_TAKES_NODE_1} (not waiting out "
                       f"MINDIO_ARF_WAIT_S)"], decided
    assert "ranks [2,3] offline; waiting up to 600000 ms (MINDIO_ARF_WAIT_S, its default)" in run.output
    # from the replicas (the default): the survivors' state resharded in memory, no dump written or loaded
    assert "(state from the replicas in " in lines[0], lines[0]
    assert "scale-in: no dump of step 4 written: the survivors reshard the state among themselves" in run.output
    for absent in ("dump of step 4: saved", "dump of step 4 published", "loading distributed checkpoint"):
        assert absent not in run.output, absent
    received = re.findall(r"scale-in: step 4's optimizer state resharded from the replicas in memory at rank (\d) "
                          r"\(\d+ pieces, (\d+) bytes received\)", run.output)
    assert sorted(rank for rank, _ in received) == ["0", "1"] and all(int(n) > 0 for _, n in received), received
    assert re.search(r"node 0\] told the recovery controller that ranks \[2, 3\] will not be replaced: noted",
                     run.output), run.output[-6000:]


def the_scale_out_line(output: str, sizes: str) -> str:
    """The new rank 0's scale-out line, logged once, after the controller decided it, once."""
    lines = re.findall(rf"elastic training: scaled out {sizes} [^\n]*", output)
    assert len(lines) == 1, output[-6000:]
    assert len(re.findall(rf"elastic training: scaling out with ranks \[2,3\] after step {RETURN_AT_STEP - 1}",
                          output)) == 1
    return lines[0]


def test_the_log_names_the_scale_out(scaled_out):
    run, _ = scaled_out
    line = the_scale_out_line(run.output, "dp2 -> dp4")
    assert re.search(rf"after step {RETURN_AT_STEP - 1} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ranks \[2, 3\], "
                     r"retired by the scale-in, returned; training goes on from sample 96", line), line
    assert len(re.findall(r"elastic training: scaled in dp4 -> dp2", run.output)) == 1


def test_the_returned_ranks_receive_the_state_from_the_replicas(scaled_out):
    """--elastic-scale-out-from replicas (the default): no checkpoint saved at the scale-out; each survivor's new
    shard lies in the whole state it held at dp2 R=2 (a copy, nothing received), the returned ranks' come
    from the survivors."""
    run, _ = scaled_out
    assert "(state from the replicas in " in the_scale_out_line(run.output, "dp2 -> dp4")
    assert re.search(rf"scale-out: no checkpoint of step {RETURN_AT_STEP - 1} saved", run.output)
    assert "scale-out: checkpoint of step" not in run.output
    received = {int(rank): int(count) for rank, count in re.findall(
        rf"step {RETURN_AT_STEP - 1}'s optimizer state resharded from the replicas in memory at rank (\d) "
        r"\(\d+ pieces, (\d+) bytes received\)", run.output)}
    assert sorted(received) == [0, 1, 2, 3], run.output[-6000:]
    assert received[0] == received[1] == 0 and received[2] > 0 and received[3] > 0, received


def test_the_demo_prints_the_timeline_and_summary_of_the_scale_out_run(demo_of_the_scale_out):
    """What `mindio-adaptor demo --scenario elastic` prints of this run: its timeline and its summary."""
    printed, code, _, _ = demo_of_the_scale_out
    assert code == 0, printed[-6000:]
    timeline = [line.split("] ", 1)[1] for line in printed.splitlines() if re.match(r"\[ *\d+\.\d\d s\] ", line)]
    assert timeline[0] == (f"run on two nodes; node 1 lost during step {LOST_DURING_STEP}, a new node 1 started once "
                           f"the job scaled in, back at step {RETURN_AT_STEP}"), timeline
    in_order = ["controller: no replacement came; scaling in without ranks [2,3] after step 4",
                "scaled in dp4 -> dp2 after step 4",
                f"controller: every retired rank is back and ready; scaling out with ranks [2,3] after step "
                f"{RETURN_AT_STEP - 1}",
                f"scaled out dp2 -> dp4 after step {RETURN_AT_STEP - 1}", "run finished"]
    assert [line for line in timeline if line in in_order] == in_order, timeline
    returns = [line for line in timeline if "returned after the scale-in" in line]
    assert sorted(returns) == [f"controller: rank {r} returned after the scale-in (node 1's new launcher)"
                               for r in (2, 3)], timeline
    for step in range(1, LAST_STEP + 1):
        assert re.search(rf"^  elastic run: step {step}/{LAST_STEP} loss \d", printed, re.M), step
    summary = printed.split("\nsummary\n", 1)[1].splitlines()
    assert summary[:3] == ["  scaled in dp4 -> dp2 after step 4",
                           f"  scaled out dp2 -> dp4 after step {RETURN_AT_STEP - 1}",
                           f"  run exited 0; steps completed {LAST_STEP} of {LAST_STEP}"], summary
    assert re.fullmatch(r"  largest relative loss difference to the uninterrupted run: \S+ \(at most 0.0001\)",
                        summary[3]), summary
    assert summary[4] == "  every step saw the same samples as the uninterrupted run", summary


@pytest.fixture(scope="module", params=[4, 2], ids=["dp4", "dp2"])
def resumed(request, scaled_in, scaled_in_dir):
    """A plain run (no adaptor flags) at dp4 or dp2 loading the checkpoint saved at dp2 and training to the
    last step."""
    scaled_in[0].require_success()
    return request.param, run_training(["--load", str(scaled_in_dir / "ckpt"), "--ckpt-step", str(SAVED_AT_DP2),
                                        "--log-sample-ids"], nproc=request.param)


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
def tp2_on_two_nodes(tmp_path_factory):
    """The issue's layout: tp2 x dp2 on two nodes of two ranks, one data-parallel slice per node (ranks 0, 1 on
    node 0; 2, 3 on node 1). Node 1 is lost after step 4 and not replaced (a 5 s wait: nothing comes): its
    whole slice is gone with it, no live rank has to leave, and node 0's two TP ranks go on at dp1."""
    return run_elastic(tmp_path_factory.mktemp("elastic_tp2_two_nodes"), lose_after=4, arf_wait_s=5,
                       flags=["--tensor-model-parallel-size", "2"])


def test_tp2_dp2_on_two_nodes_goes_on_at_dp1_like_the_uninterrupted_run(tp2_on_two_nodes, reference_runs):
    run, lost = tp2_on_two_nodes
    run.require_success()
    reference, _ = reference_runs("ha_tp2")
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    assert consumed_by_step(run.output)[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP
    # dp1 from step 5 on: both TP ranks of the one slice left name the same 8 micro-batches
    assert sorted(ranks_by_step(run.output)[LAST_STEP]) == [0] * 8 + [1] * 8
    [line] = re.findall(r"elastic training: scaled in dp2 -> dp1 [^\n]*", run.output)
    assert "(data-parallel indices [1] lost a rank; survivors [0, 1], 8 micro-batches each" in line, line
    assert "ranks [2, 3] were lost and not replaced; training goes on" in line, line
    assert "leaves the job" not in run.output  # the lost node held the whole slice
    seen = process_ids(run.output)
    for rank in (0, 1):
        assert kept_one_process(seen, rank), seen
    assert all(seen[rank]["starting"][0] in lost for rank in (2, 3)), (seen, lost)


@pytest.fixture(scope="module")
def shard_without_holder(tmp_path_factory):
    """dp4 R=2 on four one-rank nodes (shard 0 held by ranks 0 and 2, shard 1 by 1 and 3): nodes 1 and 3 are
    lost together after step 4. Shard 1 is gone with both its holders: no replacement, dump or scale-in can
    bring it back."""
    return run_elastic(tmp_path_factory.mktemp("elastic_no_holder"), lose_after=4, arf_wait_s=5,
                       nproc_per_node=1, lost_node=1, also_lost=(3,))


def test_a_shard_without_any_holder_is_refused_naming_it_and_the_job_ends(shard_without_holder):
    """A clear refusal, then the exit as without elastic training: the controller names the shard and its
    holders and why it does not scale in, nothing is saved, and the survivors end (86: resume from the last
    checkpoint)."""
    run, lost = shard_without_holder
    assert run.returncode == ENDED_BY_CONTROLLER, run.output[-6000:]
    [why] = re.findall(r"state ABNORMAL -> EXIT: no recovery possible: [^\n]*", run.output)
    assert "dump impossible, no complete replica: type 0 group 0 shard 1 (holders [1,3] all dead, faulty or " \
           "behind); elastic training cannot scale in either: no survivor holds these shards, the job ends" in why, why
    for absent in ("scaling in without ranks", "elastic training: scaled in", "dump of step", "waiting up to"):
        assert absent not in run.output, absent
    assert run.launcher_codes[0] == run.launcher_codes[2] == [ENDED_BY_CONTROLLER], run.launcher_codes
    assert max(run.losses) == 4, sorted(run.losses)


TP2_LOST_NODE, TP2_LEAVING_NODE = 3, 2  # one rank per node: rank 3 lost, rank 2 (its TP peer) leaves


@pytest.fixture(scope="module")
def tp2_scaled_in_and_out(tmp_path_factory):
    """tp2 x dp2 on four one-rank nodes, node 3 (rank 3, of data-parallel index 1) lost after step 4: rank 2,
    alive, leaves the job with its slice and node 2's launcher ends; ranks 0 and 1 go on at dp1. Then new
    launchers of nodes 2 and 3 start, and at step 7 the job grows back to dp2 (as scaled_out, but through a
    checkpoint both ways: --elastic-scale-in-from and --elastic-scale-out-from checkpoint, so that path keeps its
    end-to-end run)."""
    run, lost = run_elastic(tmp_path_factory.mktemp("elastic_tp2"), lose_after=4, return_at=RETURN_AT_STEP,
                            arf_wait_s=ARF_WAIT_S,
                            flags=["--tensor-model-parallel-size", "2", "--elastic-scale-in-from", "checkpoint",
                                   "--elastic-scale-out-from", "checkpoint"],
                            nproc_per_node=1, lost_node=TP2_LOST_NODE,
                            returning_nodes=(TP2_LEAVING_NODE, TP2_LOST_NODE))
    return run, lost


def test_tp2_dp2_scaled_in_and_out_trains_like_the_uninterrupted_run(tp2_scaled_in_and_out, reference_runs):
    run = tp2_scaled_in_and_out[0].require_success()
    reference, _ = reference_runs("ha_tp2")
    assert sorted(run.loss_line_steps) == list(range(1, LAST_STEP + 1)), run.loss_line_steps  # once each
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    assert sorted(expected) == list(range(1, LAST_STEP + 1))
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    assert consumed_by_step(run.output)[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP
    seen = process_ids(run.output)
    for rank in (0, 1):
        assert kept_one_process(seen, rank), seen


def test_tp2_the_log_names_dp1_and_the_replicas_gone(tp2_scaled_in_and_out):
    output = tp2_scaled_in_and_out[0].output
    lines = re.findall(r"elastic training: scaled in dp2 -> dp1 [^\n]*", output)
    assert len(lines) == 1, output[-6000:]
    assert "(data-parallel indices [1] lost a rank; survivors [0, 1], 8 micro-batches each" in lines[0]
    assert "optimizer replicas R=2 -> R=1: the job has no replica now, its next fault ends in the dump" in lines[0]
    assert "ranks [3] were lost and not replaced; training goes on" in lines[0]
    # --elastic-scale-in-from checkpoint: the savers wrote and published the dump of step 4, the survivors loaded it
    assert "(state loaded in " in lines[0] and "dump of step 4 published" in output, lines[0]
    assert len(re.findall(r"elastic training: scaling in without ranks \[3\] after step 4 \(ranks \[3\] will not be "
                          r"replaced: node 3 is lost \(its launcher's process is gone", output)) == 1, output[-6000:]


def test_tp2_the_live_rank_of_the_lost_slice_leaves_the_job(tp2_scaled_in_and_out):
    """Rank 2 (node 2), whose TP peer rank 3 was lost, leaves on purpose: its line, its exit code 87, node 2's
    launcher ending 0 with a summary naming it, and the controller retiring it beside the lost rank."""
    run, lost = tp2_scaled_in_and_out
    output = run.output
    leaving = re.findall(r"elastic training: rank 2 leaves the job [^\n]*", output)
    assert len(leaving) == 1, output[-6000:]
    assert re.search(r"after step 4 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: its data-parallel slice lost a rank "
                     r"\(ranks \[3\] were lost and not replaced\); the job goes on without it, dp2 -> dp1 ", leaving[0])
    assert "this process exits (code 87, LEFT_THE_JOB" in output
    first = process_ids(output)[2]["starting"][0]
    assert first not in lost
    assert re.search(rf"node {TP2_LEAVING_NODE}\] rank 2 \(local rank 0, pid {first}\) ended: exit code 87 "
                     r"\(LEFT_THE_JOB\): it left the job, which goes on without it", output), output[-6000:]
    assert re.search(rf"node {TP2_LEAVING_NODE}\] summary: no local worker exited 0; ranks \[2\] left the job, "
                     r"which went on without them \(elastic training\); exit code 0", output), output[-6000:]
    assert len(re.findall(r"elastic training: ranks \[2\] leave the job with their data-parallel slices, which "
                          r"lost a rank; the survivors go on without them", output)) == 1, output[-6000:]
    # node 2's first launcher ended 0 (its worker left), node 3's was lost; the new launchers of both ended 0
    assert run.launcher_codes[TP2_LEAVING_NODE] == [0, 0], run.launcher_codes
    assert run.launcher_codes[TP2_LOST_NODE][1:] == [0], run.launcher_codes
    assert run.launcher_codes[0] == run.launcher_codes[1] == [0], run.launcher_codes


def test_tp2_grows_back_to_dp2_with_its_replicas(tp2_scaled_in_and_out):
    run, lost = tp2_scaled_in_and_out
    line = the_scale_out_line(run.output, "dp1 -> dp2")
    assert re.search(rf"\(ranks \[2, 3\] returned; 4 micro-batches each; optimizer replicas R=1 -> R=2\) after "
                     rf"step {RETURN_AT_STEP - 1} at .*training goes on from sample 96", line), line
    # --elastic-scale-out-from checkpoint: the survivors saved the repair step at dp1, every rank loaded it
    assert "(state loaded in " in line and "resharded from the replicas" not in run.output
    savers = re.findall(rf"rank (\d)\] INFO scale-out: checkpoint of step {RETURN_AT_STEP - 1} saved at dp1 and "
                        r"published", run.output)
    assert sorted(savers) == ["0", "1"], savers
    # both returned ranks registered as returns for the ranks the scale-in retired (the lost one and the leaver)
    for rank in (2, 3):
        assert len(re.findall(rf"rank {rank} returned after the scale-in \(a restarted process\)", run.output)) == 1
    # The replica layout rank 0 built last, at the scale-out: both data-parallel lists hold two replicas again.
    layouts = re.findall(r"rank 0\] INFO replica layout: ([^\n]*)", run.output)
    assert layouts[-1].startswith("[ReplicaSet(type=0, groups=[(0,), (2,)], R=2), ReplicaSet(type=0, groups=[(1,), "
                                  "(3,)], R=2)]"), layouts
    # tp2: both TP ranks of a slice name the same micro-batches; dp1 at step 6 (8 each), dp2 at step 8 (4 each)
    by_step = ranks_by_step(run.output)
    assert sorted(by_step[RETURN_AT_STEP - 1]) == [0] * 8 + [1] * 8, by_step[RETURN_AT_STEP - 1]
    assert sorted(by_step[LAST_STEP]) == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4, by_step[LAST_STEP]
    seen = process_ids(run.output)
    # rank 3: one process lost with node 3; rank 2: one that left the job; the returned ones finished the run
    gone, last = seen[3]["starting"]
    assert gone in lost and seen[3]["done"] == [last], (seen, lost)
    left, last = seen[2]["starting"]
    assert left not in lost and seen[2]["done"] == [last], (seen, lost)


SECOND_LOSS_AFTER = 5  # rank 1's process is killed during step 6, the first at dp2
SECOND_FAULT_AFTER = 6  # rank 0, alone at dp1, fails during step 7: the dump of step 6
ERROR_AT_DP1 = f"raise:rank=0,step={SECOND_FAULT_AFTER + 1},msg=RuntimeError injected at dp1"


@pytest.fixture(scope="module")
def second_fault_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("elastic_second_fault")


@pytest.fixture(scope="module")
def second_fault(second_fault_dir):
    """As scaled_in (a shorter wait: nothing comes for node 1), then rank 1's process on node 0 is killed once
    step 5 is logged, while both survivors wait before step 6: a loss at dp2, and no process replacement at the
    smaller size, so the job scales in again, to dp1 (R=1). Rank 0 trains step 6 alone; during step 7 it raises
    an error, no loss: there is nothing to scale in over, and the job ends in the dump of step 6."""
    run, lost = run_elastic(second_fault_dir, lose_after=4, arf_wait_s=5, kill_after=SECOND_LOSS_AFTER,
                            env=fault_env(ERROR_AT_DP1, second_fault_dir))
    return run, lost


def test_a_process_lost_while_scaled_in_scales_in_again_to_dp1(second_fault, reference):
    run, lost = second_fault
    assert re.findall(r"elastic training: scaled in (dp\d -> dp\d)", run.output) == ["dp4 -> dp2", "dp4 -> dp1"]
    decision = re.findall(r"decision scale_in: faults [^\n]*\b1:node [^\n]*", run.output)
    assert len(decision) == 1 and "elastic training scales in again" in decision[0], decision
    assert "process replacement timed out" not in run.output.split(decision[0])[1]  # no replacement awaited
    # the controller learned each smaller layout: dp2 with both replicas, then rank 0 alone
    assert re.search(r"replica layout at the new size, reported by ranks \[0,1\]: type 0 R=2 \[0,1\]", run.output)
    assert re.search(r"replica layout at the new size, reported by ranks \[0\]: type 0 R=1 \[0\]", run.output)
    assert re.search(r"scale-in: rank 0 is rank 0 of 1 now; communicators rebuilt \(epoch \d+\) for dp2 -> dp1",
                     run.output), run.output[-6000:]
    # step 5 at dp2 and step 6 at dp1 (8 micro-batches on one rank) see the uninterrupted run's losses; rank 0 may
    # have begun step 6 at dp2 before rank 1's loss stopped it (its 4 micro-batches there come first)
    for step in range(1, SECOND_FAULT_AFTER + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    by_step = ranks_by_step(run.output)[SECOND_FAULT_AFTER]
    assert by_step[-8:] == [0] * 8 and len(by_step) in (8, 12), by_step


def test_an_error_at_dp1_ends_in_the_dump_of_the_dp1_layout(second_fault, second_fault_dir):
    run, lost = second_fault
    assert run.returncode == 86, run.output[-6000:]  # ENDED_BY_CONTROLLER: the controller ended the job
    assert max(run.losses) == SECOND_FAULT_AFTER, sorted(run.losses)
    decision = re.findall(r"decision dump: faults 0:[^\n]*", run.output)
    assert len(decision) == 1 and "scaled in: no online repair or process replacement" in decision[0], decision
    # rank 0, the one holder left, saved step 6 alone and published it
    assert re.search(rf"dump of step {SECOND_FAULT_AFTER}: saved my part \(savers \[0\] as data-parallel ranks "
                     rf"\[0\]\)", run.output), run.output[-6000:]
    assert len(re.findall(rf"dump of step {SECOND_FAULT_AFTER} published", run.output)) == 1
    assert "is not supported yet" not in run.output
    # node 0's launcher started rank 1 again (worker reboot): a return for the retired rank, which the controller
    # refuses while it ends the job, so that process ends with the job's code and is not started again (or,
    # had it not registered yet, it is stopped once the job ended)
    # (or, while it still joined when the controller was destroyed, it exits 1 for the lost controller and is not
    # started again: seen once under two test workers; or, started only after the controllers were gone, it reaches
    # none and exits 88, JOB_UNREACHABLE, and is not started again: seen once, its start 6 s after the job's end)
    assert re.search(r"stopped rank 1 \(pid \d+\), started again alone and still running 15 s after the recovery "
                     r"controller ended the job|rank 1 \(local rank 1, pid \d+\) ended: exit code 86 "
                     r"\(ENDED_BY_CONTROLLER\)[^\n]*the recovery controller ended the job|rank 1 \(local rank 1, "
                     r"pid \d+\) ended: exit code (1|88 \(JOB_UNREACHABLE\)); not restarted: the recovery controller "
                     r"ended the job", run.output), run.output[-3000:]
    assert "restarting the whole group" not in run.output
    latest = (second_fault_dir / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip()
    assert latest == str(SECOND_FAULT_AFTER)


@pytest.fixture(scope="module")
def scaled_in_twice_and_out(tmp_path_factory):
    """As second_fault up to dp1 (node 1 lost after step 4, rank 1's process killed after step 5, neither
    replaced). Node 0's launcher starts rank 1 again by itself (worker reboot); node 1 stays away, so after
    MINDIO_SCALE_OUT_WAIT_S the job grows part of the way, dp1 -> dp2 with rank 1, and trains step 7 there.
    Then node 1 returns (a new launcher) and with every retired rank back the job grows to dp4 for step 8."""
    return run_elastic(tmp_path_factory.mktemp("elastic_twice"), lose_after=4, kill_after=SECOND_LOSS_AFTER,
                       return_at=RETURN_AT_STEP, arf_wait_s=5, partial_return=True,
                       scale_out_wait_s=PARTIAL_SCALE_OUT_WAIT_S)


def test_scaled_in_twice_then_back_in_two_scale_outs_trains_like_the_uninterrupted_run(scaled_in_twice_and_out,
                                                                                       reference):
    run, _ = scaled_in_twice_and_out
    run.require_success()
    assert re.findall(r"elastic training: scaled in (dp\d -> dp\d)", run.output) == ["dp4 -> dp2", "dp4 -> dp1"]
    assert re.search(r"elastic training: partial scale-out: after \d+ ms \(MINDIO_SCALE_OUT_WAIT_S "
                     rf"{PARTIAL_SCALE_OUT_WAIT_S}000 ms\) ranks \[2,3\] have not returned; the job grows with the "
                     r"ready ranks \[1\]", run.output), run.output[-6000:]
    scaled_out = re.findall(r"elastic training: scaled out (dp\d -> dp\d[^(]*)\((ranks \[[\d, ]+\]) returned",
                            run.output)
    assert scaled_out == [("dp1 -> dp2 of dp4 ", "ranks [1]"), ("dp2 -> dp4 ", "ranks [2, 3]")], scaled_out
    assert "ranks [2, 3] stay out" in run.output
    assert sorted(run.loss_line_steps) == list(range(1, LAST_STEP + 1)), run.loss_line_steps
    for step in range(1, LAST_STEP + 1):
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    for step in range(1, LAST_STEP + 1):
        assert got[step] == expected[step], step
    by_step = ranks_by_step(run.output)
    # step 6 on rank 0 alone (dp1; its micro-batches at dp2 before rank 1's loss were computed again), step 7 at
    # dp2 with the returned rank 1, 4 micro-batches each, step 8 at dp4 again. A held step is let go at the
    # scale-out's decision, so the job may begin it at the smaller size before the stop: those lines come first.
    assert set(by_step[RETURN_AT_STEP - 1]) == {0}, by_step[RETURN_AT_STEP - 1]
    assert sorted(by_step[RETURN_AT_STEP][-8:]) == [0] * 4 + [1] * 4, by_step[RETURN_AT_STEP]
    assert by_step[RETURN_AT_STEP].count(1) == 4, by_step[RETURN_AT_STEP]
    assert sorted(by_step[LAST_STEP][-8:]) == [0, 0, 1, 1, 2, 2, 3, 3], by_step[LAST_STEP]
    assert by_step[LAST_STEP].count(2) == by_step[LAST_STEP].count(3) == 2, by_step[LAST_STEP]


@pytest.fixture(scope="module")
def resumed_from_the_second_dump(second_fault, second_fault_dir):
    """A plain run (no adaptor flags) at dp4 loading the published dump (the latest checkpoint)."""
    assert "published" in second_fault[0].output
    return run_training(["--load", str(second_fault_dir / "ckpt"), "--log-sample-ids"], nproc=4)


def test_the_dump_saved_at_dp1_resumes_at_dp4_like_the_uninterrupted_run(resumed_from_the_second_dump, reference,
                                                                          second_fault):
    run = resumed_from_the_second_dump.require_success()
    assert re.search(rf"successfully loaded checkpoint from \S+ \[[^\]]*\] at iteration {SECOND_FAULT_AFTER}\b",
                     run.output), run.output[-6000:]
    faulted, _ = second_fault
    for step in range(1, SECOND_FAULT_AFTER + 1):  # the faulted run to the dump, the resume after it
        assert faulted.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
    steps = range(SECOND_FAULT_AFTER + 1, LAST_STEP + 1)
    assert sorted(run.losses) == list(steps), sorted(run.losses)
    consumed = consumed_by_step(run.output)
    assert consumed[SECOND_FAULT_AFTER + 1] == 16 * (SECOND_FAULT_AFTER + 1), consumed
    assert consumed[LAST_STEP] == consumed_by_step(reference.output)[LAST_STEP] == 16 * LAST_STEP
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    for step in steps:
        assert got[step] == expected[step], step
    first, second = steps[0], steps[1]
    assert run.losses[first] == pytest.approx(reference.losses[first], rel=1e-4)
    mean = (reference.losses[first] + reference.losses[second]) / 2  # Megatron's first log after a resume
    assert run.losses[second] == pytest.approx(mean, rel=1e-4)


@pytest.fixture(scope="module")
def scaled_in_to_dp3(tmp_path_factory):
    """dp4 R=2 on four one-rank nodes: node 1 (rank 1) lost after step 4, not replaced. The three survivors
    cannot share the step's 8 micro-batches (global batch 16, micro-batch size 2) evenly: ranks 0, 2, 3 take
    3, 3 and 2 of them (core/layout/uneven_split), each loss weighted by its share (9/8, 9/8, 3/4). Then node 1
    returns (a new one-rank launcher, as in scaled_out) and at step 7 the job grows back to dp4, where the
    uneven pieces are undone: Megatron's own calculator (2 micro-batches), its sampler, no weight. The returned
    rank must be ready within MINDIO_SCALE_OUT_WAIT_S of its registration (3 s on a quiet machine, over 15 s
    under a load of 45: docs/elastic.md; tiny/elastic.SCALE_OUT_WAIT_S)."""
    return run_elastic(tmp_path_factory.mktemp("elastic_dp3"), lose_after=4, return_at=RETURN_AT_STEP,
                       arf_wait_s=ARF_WAIT_S, nproc_per_node=1)


def test_dp3_uneven_and_back_at_dp4_trains_like_the_uninterrupted_dp4_run(scaled_in_to_dp3, reference):
    run, _ = scaled_in_to_dp3
    run.require_success()
    assert sorted(run.loss_line_steps) == list(range(1, LAST_STEP + 1)), run.loss_line_steps
    for step in range(1, LAST_STEP + 1):  # at dp4, dp3 (steps 5, 6) and dp4 again (steps 7, 8)
        assert run.losses[step] == pytest.approx(reference.losses[step], rel=1e-4), step
        # the gradient of the whole global batch: the weights make the uneven shares count as the full job's,
        # and once back at dp4 no rank weighs its loss any more
        assert run.grad_norms[step] == pytest.approx(reference.grad_norms[step], rel=1e-3), step
    expected, got = samples_by_step(reference.output), samples_by_step(run.output)
    for step in range(1, LAST_STEP + 1):  # every sample of the step once, the same set as the full job
        assert got[step] == expected[step], step
    consumed = consumed_by_step(run.output)
    assert [consumed[s] for s in range(1, LAST_STEP + 1)] == [16 * s for s in range(1, LAST_STEP + 1)], consumed
    # the scheduler and the log count the global batch: the learning rates and the batch size of the full job
    assert learning_rates_and_batch(run.output) == learning_rates_and_batch(reference.output)


def test_dp3_takes_3_3_2_micro_batches_and_dp4_again_2_each(scaled_in_to_dp3):
    run, _ = scaled_in_to_dp3
    by_step = ranks_by_step(run.output)
    # Step 6, the one step wholly at dp3 (step 5 also names the micro-batches begun at dp4 before the loss): the
    # new ranks 0, 1, 2 (the survivors 0, 2, 3) take 3, 3 and 2 of the step's 8
    assert sorted(by_step[RETURN_AT_STEP - 1]) == [0, 0, 0, 1, 1, 1, 2, 2], by_step[RETURN_AT_STEP - 1]
    # Back at dp4, Megatron's own calculator: 2 micro-batches on each of ranks 0-3. Step 7 may also name the
    # micro-batches the survivors began at dp3 before the scale-out stopped them; rank 3 is only at dp4.
    assert sorted(by_step[LAST_STEP]) == [0, 0, 1, 1, 2, 2, 3, 3], by_step[LAST_STEP]
    assert by_step[RETURN_AT_STEP].count(3) == 2, by_step[RETURN_AT_STEP]
    [line] = re.findall(r"elastic training: scaled in dp4 -> dp3 [^\n]*", run.output)
    assert "survivors [0, 2, 3], 3, 3, 2 micro-batches (uneven: each rank's loss weighted by its share)" in line
    weights = re.findall(r"uneven split: data-parallel rank (\d) takes (\d) of 8 micro-batches, its loss weighted by "
                         r"([\d.]+)", run.output)
    # logged once each, at the scale-in's REPAIR; the scale-out's REPAIR weighs nothing
    assert sorted(weights) == [("0", "3", "1.125"), ("1", "3", "1.125"), ("2", "2", "0.75")], weights


def test_dp3_grows_back_to_dp4_when_node_1_returns(scaled_in_to_dp3):
    run, lost = scaled_in_to_dp3
    lines = re.findall(r"elastic training: scaled out dp3 -> dp4 [^\n]*", run.output)
    assert len(lines) == 1, run.output[-6000:]
    assert re.search(rf"\(ranks \[1\] returned; 2 micro-batches each; optimizer replicas R=1 -> R=2\) after step "
                     rf"{RETURN_AT_STEP - 1} at .*: ranks \[1\], retired by the scale-in, returned; training goes on "
                     r"from sample 96 with the global batch size 16", lines[0]), lines[0]
    assert len(re.findall(rf"elastic training: scaling out with ranks \[1\] after step {RETURN_AT_STEP - 1}",
                          run.output)) == 1
    seen = process_ids(run.output)
    for rank in (0, 2, 3):  # the survivors: the same process from start to end
        assert kept_one_process(seen, rank), seen
    gone, last = seen[1]["starting"]  # one process lost with node 1, the returned one finished the run
    assert gone in lost and seen[1]["done"] == [last], (seen, lost)
