"""What the silent-data-corruption check (docs/detection.md, "Silent data corruption") costs a step, on the real
Megatron, against the same job without the check, in one invocation on the same machine.

Two runs, dp4 R=2, 4 gloo processes: the baseline with --sdc-check-interval 0 (no check: it saves no checkpoint),
and the same job checked after every step (--verify-optimizer-replicas, whose log line gives the check's own
time on rank 0). Printed:
  step        the median step time of each run (Megatron's "elapsed time per iteration", steps after the first)
  check       the median time of one check (fingerprints, two small gathers) and its share of a step
  ratio       the checked run's median step over the baseline's (a check every step), and the ratio at the
              default interval, 1 + check / (interval x baseline step)
and whether both runs ended on the same parameters (the check only reads).

    python bench/sdc_check.py [--iters 30] [--hidden-size 256] [--num-layers 4] [--interval 20]
"""
import argparse
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script, the checkout's build is the one measured

from mindio_adaptor.tiny.job import run_training  # noqa: E402

CHECKED = re.compile(r"every optimizer shard identical on its \d+ holders \((\d+) tensors checked on rank 0 in "
                     r"([\d.]+) ms\)")


def run(args, flags):
    model = ["--enable-high-availability", "--hidden-size", str(args.hidden_size), "--num-layers",
             str(args.num_layers), *flags]
    result = run_training(model, train_iters=args.iters, env={"PYTHONPATH": str(REPO)}, timeout=1800)
    result.require_success()
    steps = [ms for step, ms in sorted(result.step_ms.items()) if step > 1]
    if not steps:
        sys.exit("sdc_check: no step times in the log (is --log-interval 1?)")
    return result, statistics.median(steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--interval", type=int, default=20, help="the interval to project the cost to")
    args = parser.parse_args()

    baseline, baseline_ms = run(args, ["--sdc-check-interval", "0"])
    checked, checked_ms = run(args, ["--verify-optimizer-replicas"])
    checks = CHECKED.findall(checked.output)
    if not checks:
        sys.exit("sdc_check: the checked run logged no check")
    check_ms = statistics.median(float(ms) for _, ms in checks)
    same = checked.digest == baseline.digest and checked.losses == baseline.losses
    print(f"sdc check: {args.iters} steps, hidden {args.hidden_size}, {args.num_layers} layers, dp4 R=2, "
          f"{checks[0][0]} shard tensors per rank")
    print(f"  step     baseline {baseline_ms:.1f} ms, checked every step {checked_ms:.1f} ms (medians)")
    print(f"  check    {check_ms:.2f} ms, {check_ms / baseline_ms:.3f} of a baseline step")
    print(f"  ratio    every step {checked_ms / baseline_ms:.3f} (measured); every {args.interval} steps "
          f"{1 + check_ms / (args.interval * baseline_ms):.4f} (projected from the check's own time)")
    print(f"  result   {'same losses and parameters' if same else 'DIFFERENT losses or parameters'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
