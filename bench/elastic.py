"""Elastic training's scale-in against the restart it replaces, and the step time at the smaller size.

Same tiny job, same machine, one invocation:
  (c) baseline   bench/mttr.py's restart: a plain job with a checkpoint every K steps dies during step F;
                 it is relaunched, loads its last checkpoint and recomputes up to F.
  (s) scale-in   dp4 R=2 on two `mindio-adaptor launch` nodes of two ranks, --enable-elastic-training:
                 node 1 (launcher and workers) SIGKILLed during step F and never replaced; timed from the
                 kill to the first step completed at dp2. The controller waits MINDIO_ARF_WAIT_S for a
                 replacement before it scales in: that wait is a setting, so it is printed as its own
                 phase and the time after it is given apart.
Step time: the median of Megatron's elapsed time per iteration at dp4 (steps 2..F-1, before the fault)
and at dp2 (from the second step after the scale-in to the end), in the faulted run itself; the global
batch is the same, so each dp2 rank takes twice the micro-batches.

    python bench/elastic.py [--fault-step 6] [--save-interval 4] [--iters 12] [--arf-wait-s 5]
"""
import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from mttr import baseline  # noqa: E402  (bench/ is not a package)

from mindio_adaptor.tiny.job import LocalCluster  # noqa: E402

ELASTIC = ["--enable-high-availability", "--enable-worker-reboot", "--enable-elastic-training"]
ITERATION = re.compile(r"iteration\s+(\d+)/")
SCALED_IN = re.compile(r"elastic training: scaled in dp(\d+) -> dp(\d+) .*? after step (\d+)")


class ScaleInClock:
    """Arrival time of each mark's first line after the node was lost; `first_step` is the first step
    line after the scale-in was logged (a step logged by node 1 before it died does not count)."""

    MARKS = {"decision": r"\] decision recover", "waited": r"elastic training: scaling in without ranks",
             "dumped": r"dump of step \d+ published", "rebuilt": r"scale-in: rank \d+ is rank \d+ of",
             "loaded": r"elastic training: scaled in dp"}

    def __init__(self, step_before: int):
        self.step_before, self.before = step_before, threading.Event()
        self.lost_at, self.seen = None, {}

    def __call__(self, line):
        now = time.monotonic()
        step = ITERATION.search(line)
        if step and int(step.group(1)) == self.step_before:
            self.before.set()
        if self.lost_at is None:
            return
        for name, pattern in self.MARKS.items():
            if name not in self.seen and re.search(pattern, line):
                self.seen[name] = now
        if step and "loaded" in self.seen and "first_step" not in self.seen:
            self.seen["first_step"] = now

    def between(self, a, b):
        seen = {"lost": self.lost_at, **self.seen}
        if a not in seen or b not in seen:
            sys.exit(f"elastic: did not see {a!r} and {b!r} after the node was lost")
        return seen[b] - seen[a]


def scale_in(args, tmp: Path):
    clock = ScaleInClock(args.fault_step - 1)
    cluster = LocalCluster([*ELASTIC, "--save", str(tmp / "ckpt_s"), "--save-interval", "1000"],
                           train_iters=args.iters, env={"MINDIO_ARF_WAIT_S": str(args.arf_wait_s)}, on_line=clock)
    cluster.start_node("--node-rank", "0")
    node_1 = cluster.start_node("--node-rank", "1")
    cluster.wait_for(clock.before, f"step {args.fault_step - 1}", timeout=600)
    clock.lost_at = time.monotonic()
    cluster.lose_node(node_1)
    run = cluster.wait(timeout=900).require_success()
    scaled = SCALED_IN.search(run.output)
    if scaled is None:
        sys.exit("elastic: the run never logged its scale-in")
    repair_step = int(scaled.group(3))
    phases = [("loss detected and decided", "lost", "decision"),
              (f"wait for a replacement ({args.arf_wait_s:g} s)", "decision", "waited"),
              ("dump saved and published", "waited", "dumped"), ("groups rebuilt at dp2", "dumped", "rebuilt"),
              ("model, optimizer built, dump loaded", "rebuilt", "loaded"),
              (f"first step at dp2 (step {repair_step + 1})", "loaded", "first_step")]
    before = [ms for step, ms in run.step_ms.items() if 2 <= step < args.fault_step]
    after = [ms for step, ms in run.step_ms.items() if step >= repair_step + 2]
    if not before or not after:
        sys.exit(f"elastic: no step times to compare (dp4 {sorted(before)}, dp2 {sorted(after)})")
    return (clock.between("lost", "first_step"), [(n, clock.between(a, b)) for n, a, b in phases],
            clock.between("decision", "waited"), statistics.median(before), statistics.median(after))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault-step", type=int, default=6)
    parser.add_argument("--save-interval", type=int, default=4, help="the baseline's checkpoint interval")
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--arf-wait-s", type=float, default=5.0,
                        help="MINDIO_ARF_WAIT_S of the scale-in run: how long a replacement is awaited")
    args = parser.parse_args()
    if not args.save_interval < args.fault_step < args.iters - 2:
        sys.exit("elastic: need save-interval < fault-step < iters - 2")
    with tempfile.TemporaryDirectory(prefix="elastic_") as tmp:
        base_s, base_phases, base_lost = baseline(args, Path(tmp))
        total_s, phases, wait_s, dp4_ms, dp2_ms = scale_in(args, Path(tmp))
    print(f"\nfault during step {args.fault_step}; baseline checkpoint every {args.save_interval} steps")
    print(f"(c) baseline restart: {base_s:.2f} s to step {args.fault_step} done; completed steps lost {base_lost}")
    for name, seconds in base_phases:
        print(f"      {name:<36} {seconds:6.2f} s")
    print(f"(s) scale-in dp4 -> dp2: {total_s:.2f} s from the loss to the first step at dp2; completed steps lost 0")
    for name, seconds in phases:
        print(f"      {name:<36} {seconds:6.2f} s")
    after_wait = total_s - wait_s
    print(f"ratios: s/c {total_s / base_s:.2f}; without the replacement wait ({wait_s:.2f} s): "
          f"{after_wait:.2f} s, (s - wait)/c {after_wait / base_s:.2f}")
    print(f"step time: dp4 {dp4_ms:.1f} ms, dp2 {dp2_ms:.1f} ms (median per step, global batch 16); "
          f"dp2/dp4 {dp2_ms / dp4_ms:.2f}")


if __name__ == "__main__":
    main()
