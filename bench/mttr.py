"""Time to recover from a fault: online repair against what a user has today, same model.

Times are taken where the job's output lines arrive (one clock, this process), from the line that
says the fault fired to the line that logs the first step completed after it:
  (a) online repair   --enable-high-availability --enable-hbmfault-repair, "UCE ERROR" on one rank
                      during step F: the same processes repair and recompute step F.
  (b) process replacement  --enable-worker-reboot under `mindio-adaptor launch`: the rank is SIGKILLed
                      during step F; only it is started again, joins, and every rank goes on from F-1.
  (c) baseline        a plain job with a periodic checkpoint every K steps: the same error kills the
                      job; it is relaunched, loads its last periodic checkpoint and recomputes up to F.
  (d) online reload   no replica (--distributed-optimizer-no-replica), the same checkpoints as (c): the
                      same processes load the last periodic checkpoint again and recompute up to F.
  (e) node lost        two launchers of two ranks play two nodes; every process of node 1 is SIGKILLed
                      during step F (timed from the kill) and a new launcher is started at once with its
                      node rank: it waits --node-lost-after, then its workers start cold and replace ranks 2, 3.
  (f) node 0 lost      the same for node 0, with --controllers 2: node 0's launcher (the host of the stores),
                      workers and active controller SIGKILLed during step F, a new launcher with node rank 0
                      started at once; node 1's backup controller takes over and leads the replacement of
                      ranks 0, 1, whose workers start cold, at node 1's workers' store.
  (g) standby          the same as (e), with a --standby launcher whose workers wait warm (Megatron initialised,
                      model and datasets built as a stand-in rank): no scheduler, no interpreter start.
  (h) warm spare       (b) with --spare-workers 1: a warm worker (as in g) takes the killed rank's place.
Prints each phase, the ratios to c and the completed steps lost (recomputed) in each case, then
the shard transfer's throughput against plain send/recv of the same bytes (bench/shard_transfer.py).

With --sweep H1,H2,...: (a) again at each hidden size (same processes, layers and steps), printing the
repaired rank's shard bytes, the time its repair stage took (manifest, step state and shard from the
peer), plain gloo send/recv of the same bytes between two processes of this machine (median of rounds),
the fraction of that bandwidth the repair achieved, and the rest of the repair (fault to the recomputed
step, less the repair stage): the overhead that should not grow with the shard.

    python bench/mttr.py [--fault-step 8] [--save-interval 5] [--iters 10] [--cases abcdefgh] [--sweep 64,256,512]
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mindio_adaptor.tiny.job import LocalCluster, run_training

ITERATION = re.compile(r"iteration\s+(\d+)/")


class Clock:
    """Arrival time of the first line matching each pattern."""

    def __init__(self):
        self.seen = {}

    def watch(self, marks):
        def on_line(line):
            now = time.monotonic()
            for name, pattern in marks.items():
                if name not in self.seen and re.search(pattern, line):
                    self.seen[name] = now
        return on_line

    def between(self, a, b):
        if a not in self.seen or b not in self.seen:
            sys.exit(f"mttr: did not see {a!r} and {b!r} in the output")
        return self.seen[b] - self.seen[a]


RECEIVED = re.compile(r"received my optimizer shard \((\d+) tensors, (\d+) bytes\) from rank \d+ in ([\d.]+) s "
                      r"\(the shard itself ([\d.]+) s\)")


def online_repair(args, tmp: Path, size_flags=(), tag="a"):
    clock = Clock()
    env = {"MINDIO_FAULT_INJECT": f"raise:rank=1,step={args.fault_step},msg=UCE ERROR bench",
           "MINDIO_FAULT_STATE_DIR": str(tmp / f"faults_{tag}")}
    marks = {"fault": r"fault injection: firing", "decision": r"\] decision retry",
             "clean": r"communicators rebuilt", "sent": r"INFO repair of step",
             "normal": r"online repair finished", "done": rf"iteration\s+{args.fault_step}/"}
    run = run_training(["--enable-high-availability", "--enable-hbmfault-repair", *size_flags], train_iters=args.iters,
                       env=env, on_line=clock.watch(marks), timeout=1800)
    run.require_success()
    phases = [("detected and decided", "fault", "decision"), ("stopped, groups rebuilt", "decision", "clean"),
              ("shard sent", "clean", "sent"), ("rolled back", "sent", "normal"),
              ("step recomputed", "normal", "done")]
    received = RECEIVED.search(run.output)
    before = [ms for step, ms in run.step_ms.items() if step < args.fault_step]
    shard = None if received is None else {
        "bytes": int(received.group(2)), "stage_s": float(received.group(3)), "shard_s": float(received.group(4)),
        "step_s": statistics.median(before) / 1000 if before else 0.0}
    return clock.between("fault", "done"), [(n, clock.between(a, b)) for n, a, b in phases], 0, shard


def plain_send_seconds(nbytes: int, rounds: int = 7) -> float:
    """Median time of one gloo send/recv of `nbytes` between two fresh processes of this machine."""
    code = ("import sys; sys.path.insert(0, %r); from shard_transfer import plain_transfer_seconds; "
            "print(plain_transfer_seconds(%d, %d))" % (str(Path(__file__).parent), nbytes, rounds))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.split()[-1])


def size_sweep(args, tmp: Path):
    print("\nsize sweep: (a) online repair at each hidden size; the repaired rank's shard against plain "
          "send/recv of its bytes", flush=True)
    rows = []
    for hidden in args.sweep:
        flags = ["--hidden-size", str(hidden), "--ffn-hidden-size", str(4 * hidden)]
        total, _, _, shard = online_repair(args, tmp, flags, tag=f"h{hidden}")
        if shard is None:
            sys.exit(f"mttr: hidden {hidden}: no 'received my optimizer shard' line in the output")
        rows.append((hidden, shard, plain_send_seconds(shard["bytes"]), total))
    print(f"  {'hidden':>6} {'shard MB':>9} {'shard s':>8} {'plain s':>8} {'fraction':>9} {'stage s':>8} "
          f"{'step s':>7} {'fault->step s':>14} {'fixed s':>8}")
    for hidden, shard, plain_s, total in rows:
        fixed = total - shard["stage_s"] - shard["step_s"]
        print(f"  {hidden:>6} {shard['bytes'] / 1e6:>9.2f} {shard['shard_s']:>8.3f} {plain_s:>8.3f} "
              f"{plain_s / max(shard['shard_s'], 1e-6):>9.2f} {shard['stage_s']:>8.3f} {shard['step_s']:>7.2f} "
              f"{total:>14.2f} {fixed:>8.2f}")
    print("  shard s: the repaired rank's receive of its shard; plain s: one gloo send/recv of the same bytes; "
          "fraction: plain over shard (goal >= 0.8 from 10 MB up); stage s: the whole repair stage (manifest, "
          "step state, shard); step s: a training step's time before the fault (the recomputed step costs as "
          "much); fixed s: fault to recomputed step, less the stage and the step")


def process_replacement(args, tmp: Path, spare_workers: int = 0):
    """(b) the killed rank's process started again by the launcher; (h) a warm spare worker takes its place."""
    clock = Clock()
    env = {"MINDIO_FAULT_INJECT": f"kill:rank=2,step={args.fault_step}",
           "MINDIO_FAULT_STATE_DIR": str(tmp / f"faults_b{spare_workers}")}
    marks = {"fault": r"fault injection: firing", "decision": r"\] decision recover",
             # a warm spare that ran ahead starts as the rank where it takes it (core/layout/warm_assignment)
             "started": r"replacement process of rank|\] takes rank \d+ after", "ready": r"replacement process ready",
             "rebuilt": r"communicators rebuilt", "sent": r"INFO repair of step",
             "normal": r"replaced, training resumes", "done": rf"iteration\s+{args.fault_step}/",
             "spare_built": r"warm spare: datasets built ahead"}
    run = run_training(["--enable-high-availability", "--enable-worker-reboot"], train_iters=args.iters,
                       env=env, on_line=clock.watch(marks), timeout=900,
                       launcher=("mindio_adaptor.launch", "--max-restarts", "1", "--spare-workers", str(spare_workers)))
    run.require_success()
    started = ("warm spare handed the rank", "its rank taken, optimizer and data loaders built") if spare_workers \
        else ("new process started", "its Megatron start-up")
    phases = [("death detected and decided", "fault", "decision"),
              (started[0], "decision", "started"), (started[1], "started", "ready"),
              ("groups rebuilt", "ready", "rebuilt"), ("shard and state sent", "rebuilt", "sent"),
              ("rolled back", "sent", "normal"), ("step recomputed", "normal", "done")]
    timed = [(n, clock.between(a, b)) for n, a, b in phases]
    if spare_workers and "spare_built" in clock.seen:
        # This short job reaches the fault while its spare, started with it on the same cores, may still be
        # building ahead: that part of the time is the spare's own start, not its takeover.
        timed.append(("(of which the spare was still building)", max(0.0, clock.between("fault", "spare_built"))))
    return clock.between("fault", "done"), timed, 0


class AfterLoss:
    """Arrival times of lines, each pattern counted only after the node was lost (a step line printed by
    the lost process before it died must not count as the recomputed step)."""

    def __init__(self, marks):
        self.marks, self.seen, self.lost_at = marks, {}, None

    def __call__(self, line):
        now = time.monotonic()
        if self.lost_at is None:
            return
        for name, pattern in self.marks.items():
            if name not in self.seen and re.search(pattern, line):
                self.seen[name] = now

    def between(self, a, b):
        seen = {"lost": self.lost_at, **self.seen}
        if a not in seen or b not in seen:
            sys.exit(f"mttr: did not see {a!r} and {b!r} after the node was lost")
        return seen[b] - seen[a]


def node_lost(args, standby: bool, node: int = 1):
    """(e) node 1 (launcher and workers) SIGKILLed during step F, a new launcher started at once with its
    node rank (cold: a new interpreter, torch and Megatron); (g) the same, a --standby waiting warm; (f)
    node 0 with its active controller (--controllers 2), a new launcher of node 0 started at once."""
    step_before = threading.Event()
    marks = {"decision": r"\] decision recover", "claimed": rf"node {node} was lost: this launcher takes its place",
             "ready": r"replacement process ready", "normal": r"replaced, training resumes",
             "done": rf"iteration\s+{args.fault_step}/", "takeover": r"backup controller taking over"}
    clock = AfterLoss(marks)

    def on_line(line):
        if re.search(rf"iteration\s+{args.fault_step - 1}/", line):
            step_before.set()
        clock(line)

    controllers = ["--controllers", "2"] if node == 0 else []  # the backup on node 1 carries the job on
    cluster = LocalCluster(["--enable-high-availability", "--enable-worker-reboot"], train_iters=args.iters,
                           launch_flags=["--node-lost-after", str(args.node_lost_after), *controllers],
                           on_line=on_line)
    nodes = [cluster.start_node("--node-rank", "0"), cluster.start_node("--node-rank", "1")]
    if standby:
        cluster.start_node("--standby")
    if not step_before.wait(600):
        cluster.kill()
        sys.exit(f"mttr: step {args.fault_step - 1} never logged")
    clock.lost_at = time.monotonic()
    cluster.lose_node(nodes[node])
    if not standby:
        cluster.start_node("--node-rank", str(node))
    result = cluster.wait(timeout=900)
    if args.log_dir:
        Path(args.log_dir, f"node_lost_{node}{'_standby' if standby else ''}.log").write_text(result.output)
    result.require_success()
    taken_over = [("backup controller took over", "lost", "takeover")] if node == 0 else []
    phases = [*taken_over, ("loss detected and decided", "lost", "decision"),
              ("new node 0 took its place (node 1 rejoined)" if node == 0 else
               "node rank taken (lifeline)", "lost", "claimed"),
              ("its workers' start-up", "claimed", "ready"), ("groups, shards, roll back", "ready", "normal"),
              ("step recomputed", "normal", "done")]
    return clock.between("lost", "done"), [(n, clock.between(a, b)) for n, a, b in phases], 0


def online_reload(args, tmp: Path):
    clock = Clock()
    env = {"MINDIO_FAULT_INJECT": f"raise:rank=1,step={args.fault_step},msg=UCE ERROR bench",
           "MINDIO_FAULT_STATE_DIR": str(tmp / "faults_d")}
    marks = {"fault": r"fault injection: firing", "decision": r"\] decision retry",
             "clean": r"communicators rebuilt", "loaded": r"reloaded the checkpoint of step",
             "normal": r"online reload finished", "done": rf"iteration\s+{args.fault_step}/"}
    flags = ["--enable-high-availability", "--enable-hbmfault-repair", "--distributed-optimizer-no-replica",
             "--save", str(tmp / "ckpt_d"), "--save-interval", str(args.save_interval)]
    run = run_training(flags, train_iters=args.iters, env=env, on_line=clock.watch(marks), timeout=900)
    run.require_success()
    loaded_step = args.save_interval * ((args.fault_step - 1) // args.save_interval)
    phases = [("detected and decided", "fault", "decision"), ("stopped, groups rebuilt", "decision", "clean"),
              ("checkpoint loaded", "clean", "loaded"), ("rolled back", "loaded", "normal"),
              (f"recompute steps {loaded_step + 1}..{args.fault_step}", "normal", "done")]
    return clock.between("fault", "done"), [(n, clock.between(a, b)) for n, a, b in phases], \
        args.fault_step - 1 - loaded_step


def baseline(args, tmp: Path):
    ckpt, faults = tmp / "ckpt", tmp / "faults_c"
    env = {"MINDIO_FAULT_INJECT": f"raise:rank=1,step={args.fault_step},msg=UCE ERROR bench",
           "MINDIO_FAULT_STATE_DIR": str(faults)}
    flags = ["--save", str(ckpt), "--save-interval", str(args.save_interval)]
    died = Clock()
    failed = run_training(flags, train_iters=args.iters, env=env, timeout=900,
                          on_line=died.watch({"fault": r"fault injection: firing"}))
    if failed.returncode == 0:
        sys.exit("mttr: the baseline job did not fail")
    ended = time.monotonic()
    relaunch = Clock()
    start = time.monotonic()
    resumed = run_training([*flags, "--load", str(ckpt)], train_iters=args.iters, env=env, timeout=900,
                           on_line=relaunch.watch({"loaded": r"successfully loaded checkpoint",
                                                   "done": rf"iteration\s+{args.fault_step}/"}))
    resumed.require_success()
    loaded_step = args.save_interval * ((args.fault_step - 1) // args.save_interval)
    phases = [("job ends", ended - died.seen["fault"]), ("relaunch, init, load", relaunch.seen["loaded"] - start),
              (f"recompute steps {loaded_step + 1}..{args.fault_step}", relaunch.between("loaded", "done"))]
    total = (ended - died.seen["fault"]) + (relaunch.seen["done"] - start)
    return total, phases, args.fault_step - 1 - loaded_step


CASES = {  # tag: (title, run(args, tmp) -> (seconds, phases, completed steps lost), goal of seconds / (c))
    "a": ("online repair", lambda args, tmp: online_repair(args, tmp)[:3], 0.04),  # and <= 1.0 s on the tiny job
    "b": ("process replacement", process_replacement, 0.5),
    "c": ("baseline restart", baseline, None),
    "d": ("online reload, no replica", online_reload, None),
    "e": ("node lost, new launcher", lambda args, tmp: node_lost(args, standby=False), None),
    "f": ("node 0 lost, new launcher", lambda args, tmp: node_lost(args, standby=False, node=0), None),
    "g": ("node lost, warm standby", lambda args, tmp: node_lost(args, standby=True), 0.2),
    "h": ("killed rank, warm spare worker", lambda args, tmp: process_replacement(args, tmp, spare_workers=1), 0.15),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault-step", type=int, default=8)
    parser.add_argument("--save-interval", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sweep", type=lambda text: [int(h) for h in text.split(",")], default=None,
                        help="hidden sizes, e.g. 64,256,512: only the online repair, at each size")
    parser.add_argument("--node-lost-after", type=float, default=3.0,
                        help="the launchers' --node-lost-after in (e), (f) and (g) (default 3 s)")
    parser.add_argument("--log-dir", default="", help="write the launchers' output of (e), (f), (g) there")
    parser.add_argument("--cases", default="".join(CASES),
                        help=f"which cases to run, e.g. cgh (default {''.join(CASES)}; c, the baseline, always runs)")
    args = parser.parse_args()
    if not args.save_interval < args.fault_step <= args.iters:
        sys.exit("mttr: need save-interval < fault-step <= iters")
    unknown = set(args.cases) - set(CASES)
    if unknown:
        sys.exit(f"mttr: --cases {args.cases!r}: unknown {sorted(unknown)}; choose from {''.join(CASES)}")
    if args.sweep:
        with tempfile.TemporaryDirectory(prefix="mttr_") as tmp:
            size_sweep(args, Path(tmp))
        return
    tags = [tag for tag in CASES if tag in args.cases or tag == "c"]
    with tempfile.TemporaryDirectory(prefix="mttr_") as tmp:
        results = {tag: CASES[tag][1](args, Path(tmp)) for tag in tags}
    print(f"\nfault during step {args.fault_step}; baseline checkpoint every {args.save_interval} steps")
    for tag, (seconds, phases, lost) in results.items():
        print(f"({tag}) {CASES[tag][0]}: {seconds:.2f} s to step {args.fault_step} done; completed steps lost {lost}")
        for name, phase_s in phases:
            print(f"      {name:<28} {phase_s:6.2f} s")
    baseline_s = results["c"][0]
    print("ratios: " + ", ".join(
        f"{tag}/c {results[tag][0] / baseline_s:.2f}" + (f" (goal <= {CASES[tag][2]})" if CASES[tag][2] else "")
        for tag in results if tag != "c"))
    if "a" in results:
        print("\nshard transfer against plain send/recv of the same bytes (bench/shard_transfer.py):", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).with_name("shard_transfer.py")), "--rounds", "11"],
                       check=True, timeout=600)


if __name__ == "__main__":
    main()
