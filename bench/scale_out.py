"""Elastic training's scale-out: the returned ranks' state from the replicas in memory, against the same
scale-out through a checkpoint (the baseline), in one invocation on the same machine.

Both runs: dp4 R=2 on two `mindio-adaptor launch` nodes of two ranks (mindio_adaptor/tiny/elastic), node
1 lost after step 4 and not replaced, the job at dp2; a new launcher of node 1 starts, and the job scales
out back to dp4 at step --return-at. Only `--elastic-scale-out-from` differs:
  (k) checkpoint  the survivors save the repair step at dp2, every rank of dp4 loads it (baseline)
  (r) replicas    every rank builds its objects empty and the optimizer state is resharded in memory
Timed from the controller's decision to scale out to the first step completed at dp4, and the part that
moves the state (the survivors' save plus rank 0's load, or rank 0's reshard). --hidden-size and
--num-layers make the state larger than the tests' tiny model (2 layers, hidden 64), so the state's part
weighs more against the fixed costs (stop, groups rebuilt, objects built).

    python bench/scale_out.py [--hidden-size 256] [--num-layers 4] [--return-at 7] [--iters 8]
"""
import argparse
import re
import sys
import tempfile
from pathlib import Path

from mindio_adaptor.tiny.elastic import run_elastic
from resize_clock import ResizeClock

SAVED = re.compile(r"scale-out: checkpoint of step \d+ saved at dp\d+ and published in ([\d.]+) s")
STATE = re.compile(r"elastic training: scaled out .*\(state (?:from the replicas|loaded) in ([\d.]+) s\)")


def scale_out(source: str, args, tmp: Path):
    clock = ResizeClock("elastic training: scaling out with ranks", "elastic training: scaled out")
    flags = ["--elastic-scale-out-from", source, "--hidden-size", str(args.hidden_size),
             "--num-layers", str(args.num_layers)]
    run, _ = run_elastic(tmp / source, lose_after=4, return_at=args.return_at, arf_wait_s=args.arf_wait_s,
                         train_iters=args.iters, on_line=clock, timeout=1500, flags=flags)
    run.require_success()
    state = STATE.search(run.output)
    if state is None:
        sys.exit(f"scale_out ({source}): the run never logged its scale-out")
    saved = SAVED.search(run.output)
    state_s = float(state.group(1)) + (float(saved.group(1)) if saved else 0.0)
    return clock.between("decided", "first_step"), state_s, run.output.count("resharded from the replicas")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--return-at", type=int, default=7)
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--arf-wait-s", type=float, default=60.0,
                        help="MINDIO_ARF_WAIT_S: the scale-in's wait, and the wait for the returned set (their start-up, "
                             "slow on a busy machine, must fit in it)")
    parser.add_argument("--workdir", default=None, help="where the runs' logs and checkpoints go (default: a new "
                                                        "temporary directory, kept and named)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scale_out_"))
    print(f"runs under {workdir}", flush=True)
    k_total, k_state, _ = scale_out("checkpoint", args, workdir)
    r_total, r_state, resharded = scale_out("replicas", args, workdir)
    if resharded != 4:
        sys.exit(f"scale_out: {resharded} ranks logged a reshard from the replicas, expected 4")
    print(f"\nmodel: {args.num_layers} layers, hidden {args.hidden_size}; dp2 -> dp4 at step {args.return_at}")
    print(f"(k) from a checkpoint: {k_total:.2f} s from the decision to the first step at dp4; "
          f"state saved + loaded {k_state:.2f} s")
    print(f"(r) from the replicas: {r_total:.2f} s from the decision to the first step at dp4; "
          f"state resharded {r_state:.2f} s")
    print(f"ratios: r/k {r_total / k_total:.2f} (whole scale-out), {r_state / k_state:.2f} (the state's part)")


if __name__ == "__main__":
    main()
