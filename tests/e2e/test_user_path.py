"""The user's path, without the suite's savings (docs/testing.md): torch.compile on with an empty cache, Megatron's
data-loader workers, every worker a new interpreter (plain torchrun; `mindio-adaptor launch` without forked workers),
and a user's script that leaves an idle non-daemon thread and an unshut ThreadPoolExecutor behind; and a user's own
script (the README's two lines before Megatron's pretraining, no garbage-collector freeze) that ends the normal way.

Both runs keep Megatron's defaults that the tiny flags change: dropout 0.1, an evaluation every 4 steps (2 batches),
and a loss line every 2 steps. One uninterrupted run under plain torchrun is the reference; one run under
`mindio-adaptor launch` has an online repair (a memory error on rank 1 in step 3) and a process replacement (rank 2
killed in the evaluation after step 4): it ends bit-identical to the reference, with the same loss lines and the
same validation lines but the interrupted evaluation's (the survivors leave it as a completed one would have left
them: training mode, so dropout, and result validation back on, the validation position after it, where the
replacement's loader starts too). Both check that every rank ends by itself, promptly, after its done line."""
import re
import time
from pathlib import Path

import pytest

from mindio_adaptor.core.process import process_ending
from mindio_adaptor.tiny.job import kept_one_process, process_ids, run_training

pytestmark = pytest.mark.e2e
SCRIPT = str(Path(__file__).with_name("user_script_leaving_threads.py"))
OWN_SCRIPT = str(Path(__file__).with_name("two_line_user_script.py"))
# Megatron's defaults the tiny flags change, back (docs/testing.md): loader workers, dropout (so the repeated step
# draws random numbers), an evaluation every 4 steps, and a loss line every 2 steps.
USERS_DEFAULTS = ["--num-workers", "2", "--attention-dropout", "0.1", "--hidden-dropout", "0.1",
                  "--eval-iters", "2", "--eval-interval", "4", "--log-interval", "2"]
FLAGS = ["--enable-high-availability", "--enable-hbmfault-repair", "--enable-worker-reboot", *USERS_DEFAULTS]
LINE_STEPS = [1, 2, 4, 6, 8]  # the first step's line, then every log interval's
_VALIDATION = re.compile(r"validation loss at iteration (\d+)( on validation set)? \| lm loss value: (\S+)")
PLAIN_TORCHRUN = ("torch.distributed.run",)
LAUNCH = ("mindio_adaptor.launch", "--max-restarts", "1")
ENDING_BOUND_S = 10.0  # from a rank's done line to its exit (issue 48)
_DONE = re.compile(r"^rank \d+ pid \d+ done$")


def user_environment(cache: Path) -> dict:
    """The tiny jobs' environment (tiny/job.JOB_ENV) with the user's settings back."""
    return {"TORCH_COMPILE_DISABLE": "0", "PET_FORK_WORKERS": "0", "TORCHINDUCTOR_CACHE_DIR": str(cache)}


def timed_run(launcher, env, script=SCRIPT, flags=FLAGS, last_line=_DONE, timeout=420):
    """The run and how long after its last line matching `last_line` the whole job ended."""
    last_done = []

    def on_line(line):
        if last_line.match(line.strip()):
            last_done.append(time.monotonic())

    run = run_training(flags, env=env, launcher=launcher, script=script, on_line=on_line, timeout=timeout)
    ended = time.monotonic()
    return run, (ended - last_done[-1]) if last_done else None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("inductor-cache")
    reference = timed_run(PLAIN_TORCHRUN, user_environment(cache))
    compiled = sorted(p.name for p in cache.iterdir())
    faults = tmp_path_factory.mktemp("faults")
    faulted = timed_run(LAUNCH, {**user_environment(cache), "MINDIO_FAULT_STATE_DIR": str(faults),
                                 "MINDIO_FAULT_INJECT": "raise:rank=1,step=3,msg=UCE ERROR user path;"
                                                        "kill:rank=2,step=4,phase=eval"})
    # the README's two lines before Megatron's own pretraining, ending the normal way (patch_all bounds it)
    own = timed_run(PLAIN_TORCHRUN, user_environment(tmp_path_factory.mktemp("own-cache")), script=OWN_SCRIPT,
                    flags=["--enable-high-availability"], last_line=re.compile(r"^params digest "))
    return reference, faulted, compiled, own


def test_the_uninterrupted_run_compiles_and_every_rank_ends_by_itself(runs):
    (run, ending_s), _, compiled, _ = runs
    run.require_success()
    assert run.digest is not None and sorted(run.loss_line_steps) == LINE_STEPS
    assert [m[:2] for m in _VALIDATION.findall(run.output)] == [("4", ""), ("8", ""), ("8", " on validation set")]
    assert compiled, "torch.compile wrote nothing into the empty cache: the fusions were not compiled"
    assert "workers are forked" not in run.output
    assert ending_s is not None and ending_s < ENDING_BOUND_S, ending_s
    # the user's idle thread is named and left behind; the unshut pool's worker was stopped by threading's exit hook
    assert re.search(r"\[mindio [\d:]+ rank 0\] ends without waiting longer for threads \(its limit passed\)",
                     run.output)
    assert "thread 'users-idle-thread' (non-daemon)" in run.output
    assert "users-unshut-pool" not in run.output
    assert not run.leftover


def test_a_repair_and_a_replacement_end_bit_identical_to_it(runs):
    (reference, _), (run, ending_s), _, _ = runs
    run.require_success()
    assert "decision retry: faults 1:memory repair_step=2" in run.output
    assert "ranks [2] replaced, training resumes at step 4" in run.output
    seen = process_ids(run.output)
    for rank in (0, 1, 3):
        assert kept_one_process(seen, rank), seen
    assert len(set(seen[2]["starting"])) == 2, seen
    assert run.losses == reference.losses
    assert sorted(run.loss_line_steps) == LINE_STEPS
    # step 4's evaluation, interrupted, prints nothing; its 2 batches of 16 samples count as read, on the survivors
    # and on the replacement, so the next evaluations read what the uninterrupted run's read
    assert re.search(r"rank 2\] INFO replacement process: validation data iterator positioned at sample 32", run.output)
    assert len(re.findall(r"evaluation interrupted by a fault: no validation line for it; the next one reads from "
                          r"sample 32", run.output)) == 3, run.output[-6000:]
    expected = [line for line in _VALIDATION.findall(reference.output) if line[0] != "4"]
    assert _VALIDATION.findall(run.output) == expected
    assert run.digest == reference.digest
    assert ending_s is not None and ending_s < ENDING_BOUND_S, ending_s
    assert not run.leftover


def test_a_users_own_script_with_the_two_lines_ends_by_itself(runs):
    *_, (run, ending_s) = runs
    run.require_success()
    assert run.digest is not None and sorted(run.loss_line_steps) == list(range(1, 9))
    assert "controller at exit:" in run.output  # the in-job controller ran and said goodbye
    assert "still alive past its ending's limit" not in run.output
    # A normal exit ends in the interpreter's teardown (the last garbage collection over the model, gloo's threads
    # joined one by one), which the example skips: every rank left the controller within 0.33 s of the digest and
    # the job ended 3.5 s after it on an idle machine, 10.0 s under the other test worker's load. The promise for a
    # normal exit is the watchdog's bound.
    assert ending_s is not None and ending_s < process_ending.HARD_LIMIT_S, ending_s
    assert not run.leftover
