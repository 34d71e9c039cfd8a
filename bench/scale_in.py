"""Elastic training's scale-in: the survivors' state resharded in memory from the replicas, against the same
scale-in through the dying-gasp checkpoint (the baseline), in one invocation on the same machine.

Both runs: dp4 R=2 on two `mindio-adaptor launch` nodes of two ranks (mindio_adaptor/tiny/elastic), node
1 lost after step --lose-after and not replaced, the job goes on at dp2. Only `--elastic-scale-in-from` differs:
  (k) checkpoint  the savers write the repair step's dump, the survivors build their objects at dp2 and load
                  it (Megatron's distributed checkpoint reshards it): the baseline
  (r) replicas    the survivors build their objects at dp2 empty, and the optimizer state they held at dp4
                  is resharded among them in memory (core/layout/state_reshard)
Timed from the controller's decision to scale in to the first step completed at dp2, and the part that moves
the state (rank 0's part of the dump plus its load, or its reshard; both include building the objects again).
--hidden-size and --num-layers make the state larger than the tests' tiny model (2 layers, hidden 64), so the
state's part weighs more against the fixed costs (stop, groups rebuilt).

    python bench/scale_in.py [--hidden-size 256] [--num-layers 4] [--lose-after 3] [--iters 6]
"""
import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script, the checkout's build is the one measured

from mindio_adaptor.tiny.elastic import run_elastic  # noqa: E402
from resize_clock import ResizeClock  # noqa: E402

SAVED = re.compile(r"rank 0\] INFO dump of step \d+: saved my part \([^)]*\) in ([\d.]+) s")
STATE = re.compile(r"elastic training: scaled in .*\(state (?:from the replicas|loaded) in ([\d.]+) s\)")


def scale_in(source: str, args, tmp: Path):
    clock = ResizeClock("elastic training: scaling in without ranks", "elastic training: scaled in")
    flags = ["--elastic-scale-in-from", source, "--hidden-size", str(args.hidden_size),
             "--num-layers", str(args.num_layers)]
    run, _ = run_elastic(tmp / source, lose_after=args.lose_after, arf_wait_s=None, train_iters=args.iters,
                         on_line=clock, timeout=1500, flags=flags)
    run.require_success()
    state = STATE.search(run.output)
    if state is None:
        sys.exit(f"scale_in ({source}): the run never logged its scale-in")
    saved = SAVED.search(run.output)
    if (saved is None) != (source == "replicas"):
        sys.exit(f"scale_in ({source}): rank 0 {'did not save' if saved is None else 'saved'} the dump")
    state_s = float(state.group(1)) + (float(saved.group(1)) if saved else 0.0)
    return clock.between("decided", "first_step"), state_s, run.output.count("resharded from the replicas")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--lose-after", type=int, default=3)
    parser.add_argument("--iters", type=int, default=6)
    parser.add_argument("--workdir", default=None, help="where the runs' logs and checkpoints go (default: a new "
                                                        "temporary directory, kept and named)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scale_in_"))
    print(f"runs under {workdir}", flush=True)
    k_total, k_state, _ = scale_in("checkpoint", args, workdir)
    r_total, r_state, resharded = scale_in("replicas", args, workdir)
    if resharded != 2:
        sys.exit(f"scale_in: {resharded} ranks logged a reshard from the replicas, expected the 2 survivors")
    print(f"\nmodel: {args.num_layers} layers, hidden {args.hidden_size}; dp4 -> dp2 after step {args.lose_after}")
    print(f"(k) through the checkpoint: {k_total:.2f} s from the decision to the first step at dp2; "
          f"state saved + loaded {k_state:.2f} s")
    print(f"(r) from the replicas: {r_total:.2f} s from the decision to the first step at dp2; "
          f"state resharded {r_state:.2f} s")
    print(f"ratios: r/k {r_total / k_total:.2f} (whole scale-in), {r_state / k_state:.2f} (the state's part)")


if __name__ == "__main__":
    main()
