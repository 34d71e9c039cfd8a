"""Fault-free cost of optimizer replicas: the plain distributed optimizer vs R replicas, same model.

Runs the example GPT on local gloo processes, alternating plain and replicated runs (the order flips
every round so drift on a noisy machine hits both), and prints:
  step time ratio X.XX   median step time with replicas / without, steps after warm-up pooled
  optimizer state bytes per rank of both, and the extra bytes next to 12*(R-1)*P/d

bf16 by default, so every rank keeps real fp32 master copies (in fp32 training the master params are
views of the model's own and only the Adam moments cost memory).

    python bench/replica_overhead.py [--rounds 3] [--iters 30] [--nproc 4] [--replicas 2]
"""
import argparse
import ast
import re
import statistics
import sys

from mindio_adaptor.tiny.job import run_training

STATE_BYTES = re.compile(r"optimizer state bytes per rank \(fp32 master copies \+ Adam moments\): (\[.*?\])")
PARAMS = re.compile(r"number of parameters on \(tensor, gtp_remat, pipeline\) model parallel rank "
                    r"\(0, 0, 0\): (\d+)")


def measure(flags, args):
    run = run_training(flags, nproc=args.nproc, train_iters=args.iters, timeout=900).require_success()
    steps = [ms for step, ms in sorted(run.step_ms.items()) if step > args.warmup]
    if len(steps) < 20:
        sys.exit(f"only {len(steps)} timed steps after warm-up; use --iters >= {args.warmup + 20}")
    state = ast.literal_eval(STATE_BYTES.search(run.output).group(1))
    params = int(PARAMS.search(run.output).group(1))
    return steps, state, params


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16")
    parser.add_argument("extra", nargs="*", help="more Megatron flags for both runs")
    args = parser.parse_args()

    common = ([] if args.fp32 else ["--bf16"]) + args.extra
    variants = {"plain": common,
                "replicas": common + ["--enable-high-availability", "--optimizer-replica-num", str(args.replicas)]}
    times = {name: [] for name in variants}
    state = {}
    params = None
    for round_index in range(args.rounds):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in order:
            steps, state[name], params = measure(variants[name], args)
            times[name] += steps
            print(f"round {round_index + 1} {name:8s}: median step {statistics.median(steps):.1f} ms "
                  f"over {len(steps)} steps", flush=True)

    plain_ms, replica_ms = statistics.median(times["plain"]), statistics.median(times["replicas"])
    print(f"plain median step {plain_ms:.1f} ms, replicas median step {replica_ms:.1f} ms "
          f"({len(times['plain'])} and {len(times['replicas'])} steps)")
    print(f"step time ratio {replica_ms / plain_ms:.2f}")

    r, d = args.replicas, args.nproc  # dp = nproc unless extra flags add model parallelism
    extra = [b - a for a, b in zip(state["plain"], state["replicas"])]
    predicted = 12 * (r - 1) * params / d
    print(f"optimizer state bytes per rank: plain {state['plain']}, replicas {state['replicas']}")
    print(f"extra bytes per rank: measured {extra} (mean {statistics.mean(extra):.0f}), "
          f"formula 12*(R-1)*P/d = 12*{r - 1}*{params}/{d} = {predicted:.0f}")
    print(f"total bytes: plain {sum(state['plain'])} = 12*P ({12 * params}); replicas "
          f"{sum(state['replicas'])} = 12*P*R ({12 * params * r})")


if __name__ == "__main__":
    main()
