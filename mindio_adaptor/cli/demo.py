"""`mindio-adaptor demo`: a 4-process CPU GPT training with high availability, a fault injected
mid-run, the checkpoint written on the way out, the relaunch that resumes from it, and a timeline
(for repair and replace also drawn: WORKDIR/timeline.svg, one lane per rank).

Scenarios:
  sigterm  a job manager's graceful stop reaches one rank; every rank saves the step it just completed
           and exits; the relaunch resumes.
  dump     one rank fails (--fault-kind kill, raise or hang); the survivors save one checkpoint of
           the last step completed everywhere (the dying-gasp checkpoint) and exit; the relaunch
           resumes from it, losing only the interrupted step.
  repair   a memory error (UCE) on one rank: communicators rebuilt, its optimizer shard copied from
           a replica peer, every rank rolls back and recomputes the step; no process restarts,
           no checkpoint, no relaunch.
  replace  one rank is SIGKILLed; under `mindio-adaptor launch` only its process is started again,
           joins the running job, receives its shard and the step's state from a replica peer, and
           training goes on; the other processes never stop running.
  elastic  dp4 on two `mindio-adaptor launch` nodes of two ranks (--enable-elastic-training): node 1 is lost
           during --fault-step and nothing replaces it (no standby), so the job scales in to dp2 and
           trains on; a new launcher of node 1 starts, and two steps later the job scales out to dp4 again.
           No process of node 0 restarts; the losses stay within 1e-4 of the uninterrupted run and every
           step sees the same samples.
"""
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

from mindio_adaptor.tiny.job import RunResult, run_training

SCENARIOS = ("sigterm", "dump", "repair", "replace", "elastic")
FAULT_KINDS = ("kill", "raise", "hang")
# A hang is found by the controller's hang rule with its defaults (~12 s here); a short stop timeout
# keeps the hung rank's failed STOP short.
HANG_ENV = {"MINDIO_STOP_TIMEOUT_S": "5"}
HA = ["--enable-high-availability"]
# How long the controller waits for node 1 before scaling in (the wait for its return, which must fit the
# returned ranks' start-up, is tiny/elastic.SCALE_OUT_WAIT_S).
ELASTIC_ARF_WAIT_S = 15
LOSS_TOLERANCE = 1e-4  # relative: at another data-parallel size the reductions run in another order
_STEP = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*?lm loss: ([\d.E+-]+)")


def register(subparsers):
    parser = subparsers.add_parser("demo", help="watch a fault, the checkpoint on the way out and the "
                                                "resume on a 4-process CPU training")
    parser.add_argument("--scenario", choices=SCENARIOS, default="dump")
    parser.add_argument("--steps", type=int, default=12, help="training steps (default 12)")
    parser.add_argument("--fault-step", type=int, default=6, help="step during which the fault comes")
    parser.add_argument("--fault-rank", type=int, default=2, help="rank the fault hits")
    parser.add_argument("--fault-kind", choices=FAULT_KINDS, default="kill",
                        help="dump scenario: how the rank fails (default kill)")
    parser.add_argument("--nproc", type=int, default=4, help="processes (default 4)")
    parser.add_argument("--workdir", default=None, help="where checkpoints go (default: a temporary dir)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per launch")
    parser.set_defaults(func=run)


class Timeline:
    def __init__(self):
        self.start = time.monotonic()
        self.events = []

    def mark(self, what: str, key: str = ""):
        self.events.append((time.monotonic() - self.start, what, key))
        print(f"[{self.events[-1][0]:7.2f} s] {what}", flush=True)

    def seen(self, key: str) -> bool:
        return any(k == key for _, _, k in self.events)


def _watch(timeline: Timeline, phase: str):
    def on_line(line: str):
        step = _STEP.search(line)
        if step:
            print(f"  {phase}: step {step.group(1)}/{step.group(2)} loss {float(step.group(3)):.6f}", flush=True)
        elif "fault injection: firing" in line:
            timeline.mark("fault: " + line.split("fault injection: ", 1)[1].split(" at 20")[0])
        elif "[controller rank" in line and "lost the connection of rank" in line and phase == "faulty run":
            timeline.mark("the controller lost the connection of " + line.split("connection of ", 1)[1].split(":")[0])
        elif "[controller rank" in line and "fault on rank" in line and not timeline.seen("detected"):
            timeline.mark("detected by the controller: " + line.split("fault on ", 1)[1].strip(), key="detected")
        elif "[controller rank" in line and "] decision " in line:
            timeline.mark("controller decision: " + line.split("] decision ", 1)[1].split(":")[0])
        elif "dump of step" in line and "published" in line:
            timeline.mark("dump written: iteration " + line.split("dump of step ", 1)[1].split()[0])
        elif "training ended by the recovery controller" in line and not timeline.seen("ended"):
            timeline.mark("the processes exit, as the controller decided", key="ended")
        elif "] INFO communicators rebuilt" in line and not timeline.seen("clean"):
            timeline.mark("communicators rebuilt, Megatron re-pointed: " + line.split("] INFO ", 1)[1].strip(),
                          key="clean")
        elif "replacement process of rank" in line:
            timeline.mark("the launcher started a new process for the dead rank; it starts Megatron alone")
        elif "replacement process ready" in line:
            timeline.mark("the new process is ready and waits for the controller")
        elif "replaced, training resumes at step" in line:
            timeline.mark("controller: " + line.split("REPAIR -> NORMAL: ", 1)[-1].strip())
        elif "INFO repair of step" in line:
            timeline.mark("state sent: " + line.split("] INFO ", 1)[1].strip())
        elif "online repair finished at step" in line:
            timeline.mark("controller: online repair finished; the interrupted step is recomputed")
        elif "exiting program after receiving SIGTERM" in line:
            timeline.mark("every rank saw the signal and saved its checkpoint")
        elif "successfully saved checkpoint from iteration" in line:
            timeline.mark("checkpoint written: iteration " + line.split("iteration")[1].split()[0])
        elif "elastic training:" in line:
            _mark_elastic(timeline, line.split("elastic training: ", 1)[1].strip())
        elif "returned after the scale-in" in line:
            timeline.mark("controller: " + line.split("] ")[-1].split(" (a restarted")[0] + " (node 1's new launcher)")
        elif "successfully loaded checkpoint" in line:
            loaded = "relaunch loaded" if phase == "resumed" else "loaded"  # elastic: in-process, no relaunch
            timeline.mark(f"{loaded} the checkpoint at iteration " + line.rsplit("iteration", 1)[1].strip())
    return on_line


def _mark_elastic(timeline: Timeline, said: str) -> None:
    if said.startswith("scaling in"):
        timeline.mark("controller: no replacement came; " + said.split(" (", 1)[0])
    elif said.startswith(("scaled in", "scaled out")):
        timeline.mark(said.split(" (", 1)[0] + " after step " + said.split(" after step ", 1)[1].split()[0])
    elif said.startswith("scaling out"):
        timeline.mark("controller: every retired rank is back and ready; " + said.split(" (", 1)[0])


def _check(args):
    if not 1 <= args.fault_step < args.steps:
        sys.exit(f"mindio-adaptor demo: --fault-step must be in 1..{args.steps - 1}")
    if not 0 <= args.fault_rank < args.nproc:
        sys.exit(f"mindio-adaptor demo: --fault-rank must be in 0..{args.nproc - 1}")
    if args.scenario == "elastic" and (args.nproc != 4 or args.fault_step > args.steps - 2):
        sys.exit("mindio-adaptor demo: --scenario elastic runs 4 processes as two nodes (--nproc 4) and needs two "
                 f"steps after the fault for the return (--fault-step at most {args.steps - 2})")
    if args.scenario in ("dump", "replace") and args.fault_rank == 0:
        sys.exit("mindio-adaptor demo: --fault-rank 0 hosts the in-job controller; a fault there ends the "
                 "controller with it (run one outside the job with MINDIO_CONTROLLER_ADDR); pick 1.."
                 f"{args.nproc - 1}")


def run(args) -> int:
    _check(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="mindio-demo-"))
    timeline = Timeline()
    timeline.mark(f"uninterrupted reference run: {args.steps} steps on {args.nproc} processes")
    reference_flags = [*HA, "--log-sample-ids"] if args.scenario == "elastic" else HA
    reference = run_training(reference_flags, on_line=_watch(timeline, "reference"), nproc=args.nproc,
                             train_iters=args.steps, timeout=args.timeout).require_success()
    return scenario(args, timeline, reference, workdir)


def scenario(args, timeline: Timeline, reference: RunResult, workdir: Path) -> int:
    """The scenario after its reference run (the e2e tests pass a reference of their own, trained once)."""
    ckpt, faults = workdir / "checkpoints", workdir / "fault-state"
    common = dict(nproc=args.nproc, train_iters=args.steps, timeout=args.timeout)
    if args.scenario == "elastic":
        return elastic(args, timeline, reference, workdir)[0]
    if args.scenario in ("repair", "replace"):
        return _recover_in_place(args, timeline, reference, faults, common, workdir)
    kind = "sigterm" if args.scenario == "sigterm" else args.fault_kind
    env = {"MINDIO_FAULT_INJECT": f"{kind}:rank={args.fault_rank},step={args.fault_step}",
           "MINDIO_FAULT_STATE_DIR": str(faults), **(HANG_ENV if kind == "hang" else {})}
    timeline.mark(f"run with a fault ({kind}) on rank {args.fault_rank} during step {args.fault_step}")
    stopped = run_training([*HA, "--save", str(ckpt), "--save-interval", str(10 ** 6)], env=env,
                           on_line=_watch(timeline, "faulty run"), **common)
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    expected_exit = "0" if kind == "sigterm" else "non-zero"
    if (stopped.returncode == 0) != (kind == "sigterm") or not tracker.exists():
        print(stopped.output[-4000:], file=sys.stderr)
        sys.exit(f"mindio-adaptor demo: the faulty run exited {stopped.returncode} (expected {expected_exit}) "
                 f"{'with' if tracker.exists() else 'without'} a checkpoint (see above)")
    saved = int(tracker.read_text().strip())

    timeline.mark("relaunch with --load")
    resumed = run_training([*HA, "--load", str(ckpt)], env=env, on_line=_watch(timeline, "resumed"),
                           **common).require_success()
    timeline.mark("resumed run finished")

    done_before = max(stopped.losses, default=0)
    equal = resumed.digest is not None and resumed.digest == reference.digest
    print("\nsummary")
    print(f"  faulty run exited {stopped.returncode} ({expected_exit} expected for {kind})")
    print(f"  steps completed before the stop: {done_before}; checkpoint at iteration {saved}; "
          f"steps lost: {done_before - saved}"
          + ("; the interrupted step is recomputed" if kind != "sigterm" else ""))
    print(f"  resumed at step {min(resumed.losses, default=0)}, finished at step {max(resumed.losses, default=0)}")
    print(f"  params digest equal to the uninterrupted run: {'yes' if equal else 'no'}")
    second = saved + 2
    if resumed.losses.get(second) != reference.losses.get(second):
        print(f"  note: Megatron's second log line after a resume shows the mean of steps {second - 1} "
              f"and {second}; the parameters are what the digest compares")
    print(f"  checkpoints kept in {ckpt}")
    return 0 if equal else 1


def _timeline_picture(workdir: Path, output: str) -> str:
    """The run's log and its recoveries drawn (status/timeline_picture) next to the demo's other files."""
    from mindio_adaptor.status.timeline_picture import NoRecoveries, draw, read_recoveries

    log, picture = workdir / "recovered-run.log", workdir / "timeline.svg"
    log.write_text(output)
    try:
        draw(read_recoveries([log]), picture)
    except NoRecoveries:
        return f"no recovery in {log} to draw"
    return f"recovery timeline drawn in {picture} (from {log})"


def _recover_in_place(args, timeline, reference, faults, common, workdir: Path) -> int:
    """repair and replace: the job recovers while running; nothing is relaunched."""
    if args.scenario == "repair":
        spec, what = f"raise:rank={args.fault_rank},step={args.fault_step},msg=UCE ERROR (demo)", "a memory error (UCE)"
        flags, extra = [*HA, "--enable-hbmfault-repair"], {}
    else:
        spec, what = f"kill:rank={args.fault_rank},step={args.fault_step}", "SIGKILL"
        flags, extra = [*HA, "--enable-worker-reboot"], {"launcher": ("mindio_adaptor.launch", "--max-restarts", "1")}
    env = {"MINDIO_FAULT_INJECT": spec, "MINDIO_FAULT_STATE_DIR": str(faults)}
    timeline.mark(f"run with {what} on rank {args.fault_rank} during step {args.fault_step}")
    recovered = run_training(flags, env=env, on_line=_watch(timeline, "recovered run"), **common, **extra)
    if recovered.returncode != 0:
        print(recovered.output[-4000:], file=sys.stderr)
        sys.exit(f"mindio-adaptor demo: the run with the fault exited {recovered.returncode} (see above)")
    timeline.mark("run finished")
    equal = recovered.digest is not None and recovered.digest == reference.digest
    print("\nsummary")
    print("  each rank's recovery:")
    for line in sorted(set(re.findall(r"recovery \d+ on rank .*", recovered.output))):
        print(f"    {line}")
    restarts = "only the killed rank's process restarted" if args.scenario == "replace" else "no process restarted"
    print(f"  steps completed: {len(recovered.losses)} of {args.steps}; {restarts}; no checkpoint, no relaunch")
    print(f"  losses equal to the uninterrupted run: {'yes' if recovered.losses == reference.losses else 'no'}")
    print(f"  params digest equal to the uninterrupted run: {'yes' if equal else 'no'}")
    print(f"  {_timeline_picture(workdir, recovered.output)}")
    return 0 if equal else 1


def elastic(args, timeline: Timeline, reference: RunResult, workdir: Path) -> Tuple[int, RunResult, List[int]]:
    """elastic, after its reference run: the job scales in when node 1 is lost and out when it returns; nothing
    is relaunched. Prints the timeline and the summary; returns the exit code, the run and the pids lost with
    node 1 (the e2e tests run the scenario through here with a reference of their own)."""
    from mindio_adaptor.tiny.elastic import run_elastic

    back = args.fault_step + 2
    timeline.mark(f"run on two nodes; node 1 lost during step {args.fault_step}, a new node 1 started once the job "
                  f"scaled in, back at step {back}")
    run, lost = run_elastic(workdir / "elastic", lose_after=args.fault_step - 1, return_at=back,
                            arf_wait_s=ELASTIC_ARF_WAIT_S, train_iters=args.steps,
                            on_line=_watch(timeline, "elastic run"), timeout=args.timeout)
    timeline.mark("run finished")
    lines, ok = elastic_summary(run, reference)
    print("\nsummary")
    for line in lines:
        print(f"  {line}")
    print(f"  the whole log: {workdir / 'elastic' / 'output.txt'}")
    return (0 if ok else 1), run, lost


def elastic_summary(run: RunResult, reference: RunResult) -> Tuple[List[str], bool]:
    """What the elastic run shows against the uninterrupted one, and whether it holds: the job finished,
    every loss within LOSS_TOLERANCE relative, the same samples in every step."""
    from mindio_adaptor.tiny.elastic import samples_by_step

    lines = [f"{what} after step {step}" for what, step in
             re.findall(r"elastic training: (scaled (?:in|out) dp\d+ -> dp\d+) .*? after step (\d+)", run.output)]
    steps = sorted(reference.losses)
    missing = [s for s in steps if s not in run.losses]
    worst = max((abs(run.losses[s] - reference.losses[s]) / abs(reference.losses[s]) for s in steps
                 if s in run.losses), default=float("inf"))
    expected, seen = samples_by_step(reference.output), samples_by_step(run.output)
    differing = [s for s in sorted(expected) if seen.get(s) != expected[s]]
    lines.append(f"run exited {run.returncode}; steps completed {len(steps) - len(missing)} of {len(steps)}")
    lines.append(f"largest relative loss difference to the uninterrupted run: {worst:.1e} (at most {LOSS_TOLERANCE:g})")
    lines.append("every step saw the same samples as the uninterrupted run" if not differing else
                 f"steps {differing} saw other samples than the uninterrupted run")
    ok = run.returncode == 0 and not missing and worst <= LOSS_TOLERANCE and not differing
    return lines, ok
