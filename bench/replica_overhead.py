"""Fault-free cost of high availability: the plain job vs the same job with --enable-high-availability, per step and
per byte, part by part, at two model sizes and two rank counts.

For each size and rank count it runs, interleaved (the order flips every round so drift on a noisy machine hits
every variant alike): the plain distributed optimizer, high availability with one copy of each shard
(--optimizer-replica-num 1: every part but the replicas), and high availability with every default (R = 2). It
prints:
  step time ratio X.XX             median step with every default / plain, the steps after warm-up of all rounds
  CPU per step ratio X.XX          the CPU all the job's processes used per step, pooled likewise: a machine's
                                   stalls stretch wall time, not CPU
  a table of what each part runs on the training thread per step (core/steps/step_path_costs: each rank's line at
    its end, mean over the ranks and the rounds), frames and bytes to the controller, the CPU of the native
    threads, beside the ratios of both high-availability variants: a part that grows with the model size is
    size-proportional, one that grows with the rank count rank-proportional, the rest fixed
  optimizer state bytes per rank of plain and R = 2, and the extra bytes next to 12*(R-1)*P/d

bf16 by default, so every rank keeps real fp32 master copies (in fp32 training the master params are views of
the model's own and only the Adam moments cost memory).

    python bench/replica_overhead.py [--rounds 3] [--iters 40] [--sizes tiny,larger] [--ranks 2,4]
"""
import argparse
import ast
import re
import statistics
import sys
import uuid

from mindio_adaptor.core.steps.step_path_costs import LINE, parse_line
from mindio_adaptor.tiny.job import RUN_ID_ENV, cpu_seconds_of_run, run_training

STATE_BYTES = re.compile(r"optimizer state bytes per rank \(fp32 master copies \+ Adam moments\): (\[.*?\])")
ITERATION = re.compile(r"iteration\s+(\d+)/")
PARAMS = re.compile(r"number of parameters on \(tensor, gtp_remat, pipeline\) model parallel rank "
                    r"\(0, 0, 0\): (\d+)")
# Appended to the tiny job's flags (the later of a repeated flag wins): the larger model has 4x the layers' width,
# twice the depth and 4x the sequence, about 40x the compute per step.
SIZES = {"tiny": [],
         "larger": ["--num-layers", "4", "--hidden-size", "256", "--seq-length", "128",
                    "--max-position-embeddings", "128"]}
HA = ["--enable-high-availability"]
VARIANTS = {"plain": [], "HA R=1": HA + ["--optimizer-replica-num", "1"], "HA default": HA}


def measure(flags, args, nproc):
    run_id, cpu_at = uuid.uuid4().hex, {}
    first, last = args.warmup, args.iters - 1  # CPU from the end of warm-up to the end of the last step but one

    def on_line(line):
        found = ITERATION.search(line)
        if found and int(found.group(1)) in (first, last) and int(found.group(1)) not in cpu_at:
            cpu_at[int(found.group(1))] = cpu_seconds_of_run(run_id)

    run = run_training(flags, nproc=nproc, train_iters=args.iters, timeout=1800, env={RUN_ID_ENV: run_id},
                       on_line=on_line).require_success()
    steps = [ms for step, ms in sorted(run.step_ms.items()) if step > args.warmup]
    if len(steps) < 10:
        sys.exit(f"only {len(steps)} timed steps after warm-up; use --iters >= {args.warmup + 10}")
    lines = [parse_line(m.group(0)) for m in LINE.finditer(run.output)]
    state = STATE_BYTES.search(run.output)
    return {"steps": steps, "lines": lines, "state": ast.literal_eval(state.group(1)) if state else None,
            "params": int(PARAMS.search(run.output).group(1)),
            "cpu_ms": 1000 * (cpu_at[last] - cpu_at[first]) / (last - first)}


def run_config(size, nproc, args, common):
    times = {name: [] for name in VARIANTS}
    lines = {name: [] for name in VARIANTS}
    cpu = {name: [] for name in VARIANTS}
    last = {}
    for round_index in range(args.rounds):
        order = list(VARIANTS) if round_index % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            result = measure(common + SIZES[size] + VARIANTS[name], args, nproc)
            times[name] += result["steps"]
            lines[name] += result["lines"]
            cpu[name].append(result["cpu_ms"])
            last[name] = result
            print(f"  {size} dp{nproc} round {round_index + 1} {name:10s}: median step "
                  f"{statistics.median(result['steps']):.1f} ms, CPU {result['cpu_ms']:.1f} ms a step", flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians.update({f"cpu {name}": statistics.median(values) for name, values in cpu.items()})
    return medians, lines, last


def mean_parts(lines):
    """part -> mean microseconds per step over every rank's line; counters likewise."""
    parts, counters = {}, {}
    for said in lines:
        for part, (_, us) in said["parts"].items():
            parts.setdefault(part, []).append(us)
        for name, value in said["counters"].items():
            counters.setdefault(name, []).append(value)
    return ({part: statistics.mean(v) for part, v in parts.items()},
            {name: statistics.mean(v) for name, v in counters.items()})


def print_table(results):
    configs = list(results)
    parts = sorted({part for medians, lines, _ in results.values() for part in mean_parts(lines["HA default"])[0]})
    counters = sorted({name for medians, lines, _ in results.values() for name in mean_parts(lines["HA default"])[1]})
    width = max(len(part) for part in parts + counters + ["plain CPU per step, ms (all ranks)"]) + 2
    print("\nper step, HA default (parts: microseconds on the training thread, mean over ranks and rounds)")
    print("".ljust(width) + "".join(f"{c:>16s}" for c in configs))
    rows = [("plain median step, ms", lambda r: r[0]["plain"]),
            ("step time / plain, HA R=1", lambda r: r[0]["HA R=1"] / r[0]["plain"]),
            ("step time / plain, HA default", lambda r: r[0]["HA default"] / r[0]["plain"]),
            ("plain CPU per step, ms (all ranks)", lambda r: r[0]["cpu plain"]),
            ("CPU / plain, HA R=1", lambda r: r[0]["cpu HA R=1"] / r[0]["cpu plain"]),
            ("CPU / plain, HA default", lambda r: r[0]["cpu HA default"] / r[0]["cpu plain"])]
    for label, value in rows:
        print(label.ljust(width) + "".join(f"{value(results[c]):16.3f}" for c in configs))
    for part in parts:
        print(part.ljust(width) + "".join(f"{mean_parts(results[c][1]['HA default'])[0].get(part, 0):16.0f}"
                                          for c in configs))
    total = {c: sum(mean_parts(results[c][1]["HA default"])[0].values()) for c in configs}
    print("all parts, us".ljust(width) + "".join(f"{total[c]:16.0f}" for c in configs))
    print("all parts / plain step".ljust(width) +
          "".join(f"{total[c] / 1000 / results[c][0]['plain']:16.3f}" for c in configs))
    for name in counters:
        print(name.ljust(width) + "".join(f"{mean_parts(results[c][1]['HA default'])[1].get(name, 0):16.1f}"
                                          for c in configs))


def print_memory(last, nproc, replicas=2):
    plain, ha, params = last["plain"]["state"], last["HA default"]["state"], last["plain"]["params"]
    extra = [b - a for a, b in zip(plain, ha)]
    predicted = 12 * (replicas - 1) * params / nproc
    print(f"optimizer state bytes per rank: plain {plain}, replicas {ha}")
    print(f"extra bytes per rank: measured {extra} (mean {statistics.mean(extra):.0f}), "
          f"formula 12*(R-1)*P/d = 12*{replicas - 1}*{params}/{nproc} = {predicted:.0f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sizes", default="tiny,larger", help=f"of {', '.join(SIZES)}")
    parser.add_argument("--ranks", default="2,4", help="data-parallel sizes (processes), comma-separated")
    parser.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16")
    parser.add_argument("extra", nargs="*", help="more Megatron flags for every run")
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    unknown = set(sizes) - set(SIZES)
    if unknown:
        sys.exit(f"--sizes: unknown {sorted(unknown)}; known: {', '.join(SIZES)}")
    common = ([] if args.fp32 else ["--bf16"]) + args.extra
    results = {}
    for size in sizes:
        for nproc in (int(n) for n in args.ranks.split(",")):
            print(f"{size} model, {nproc} ranks:", flush=True)
            results[f"{size} dp{nproc}"] = run_config(size, nproc, args, common)
            medians, _, last = results[f"{size} dp{nproc}"]
            print(f"{size} dp{nproc}: plain median step {medians['plain']:.1f} ms, HA default "
                  f"{medians['HA default']:.1f} ms, HA R=1 {medians['HA R=1']:.1f} ms")
            print(f"{size} dp{nproc}: step time ratio {medians['HA default'] / medians['plain']:.2f}, CPU per step "
                  f"ratio {medians['cpu HA default'] / medians['cpu plain']:.2f}")
            print_memory(last, nproc)
    print_table(results)


if __name__ == "__main__":
    main()
