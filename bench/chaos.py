"""Chaos soak: faults at random steps of a two-node job, each run checked against an uninterrupted one.

Two `mindio-adaptor launch` processes play two nodes of two ranks (dp4, R=2, a shard's two holders on
different nodes, the controllers hosted by the launchers: node 0's active, node 1's a backup), online
repair and worker reboot on. While the job trains, faults are injected, each a random fraction of a step
after the log line of a random step (so they land in every phase of a step):
  kill   a rank's worker SIGKILLed
  stall  a rank's worker SIGSTOPped for 3-8 s, then SIGCONT
  node   a node lost: its launcher and workers SIGKILLed; a new launcher with its node rank is started
         --replace-after s later, as a rescheduled pod would be. Node 0 (the host of the launchers' store)
         only with --node0 (or in a --sequence). With --standby a standby launcher waits beside the job,
         its workers warm: it takes the place of a lost node at once (node 0's too: on this one machine it
         can listen at node 0's address), and the new launcher started --replace-after s later is the next
         standby.
  uce    a rank's memory error (UCE), raised in the forward, backward or optimizer phase of the step after:
         an online repair from its replica peer
  hang   a rank's training thread stuck in the step after (its process alive): found by the hang rule,
         the process replaced
  flip   one bit of a rank's optimizer shard flipped after the step's update (silent corruption): found
         when the holders compare their shards before a periodic checkpoint (the job saves every
         FLIP_SAVE_INTERVAL steps when flips are planned), every rank reloads the last one
  pause  the operator pauses the job (`mindio-adaptor pause`) for PAUSE_S, through the leading
         controller's status server
  drain  the operator moves a rank to a new process (`mindio-adaptor drain --rank`): a hot switch
uce, hang and flip are planned at the start (MINDIO_FAULT_INJECT names the rank and the step), as a device
error comes from inside the step; the others are done from outside once the step's line is seen.
One fault per --every s of training at --step-s a step (or --count), spread over the run; a fault waits for the
step it follows, so it never lands before the previous one recovered.

Per fault: kind, target, the step it followed, seconds to recovery (from the fault to the first step
completed after it: the first "recovery N on rank R ...; first step done" line, or, for a fault that raised
none such as a short stall, the first step logged after it ended), its slowest recovery phase (each phase of
the ranks' recovery lines, the slowest rank's), the controller's first decision after it, and the outcome
(recovered, or how the job ended). The summary gives each kind's phases, median and worst. Per run: the final
params digest and every loss line against an uninterrupted reference run of the same flags, trained once in the
same invocation; the steps
whose loss line is missing; the job's processes left behind; the share of faults recovered with no operator;
the goodput (productive step time / training wall time: the steps trained, each once, at the run's median
step time, over the time from the first step's start to the last step's line) as a ratio to the reference's.

The model is the tiny GPT made bigger (4 layers, hidden 256) so that a step takes ~0.6 s on a loaded two-core
machine, as a real step is long against the recovery's fixed costs; --model-flags changes it.

    python bench/chaos.py --seeds 1-3 --node0 [--faults kill,stall,node] [--steps 300] [--every 30 | --count 5]
    python bench/chaos.py --sequence node1,node0,kill:rank=2 [--steps 300]
    python bench/chaos.py --sequence node0@3,node0@6 --steps 10      # each fault after the given step's line
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from mindio_adaptor.tiny.job import LocalCluster, RunResult, loss_lines

KINDS = ("kill", "stall", "node", "uce", "hang", "flip", "pause", "drain")
PLANNED = ("uce", "hang", "flip")  # injected by the rank itself (MINDIO_FAULT_INJECT)
OPERATOR = ("pause", "drain")  # asked of the leading controller's status server
PHASES = ("forward", "backward", "optimizer")  # where a planned uce or hang lands: by the fault's delay
FLIP_SAVE_INTERVAL = 4
PAUSE_S = 2.0
OPERATOR_RETRY_S = 30.0  # an operator's pause or drain refused while another runs is asked again, this long
TOKEN = "chaos-soak-token-0123456789abcdef"
STATUS_PAGE = re.compile(r"status page on http://127\.0\.0\.1:(\d+)/")
FIRED = "fault injection: firing {kind} on rank {rank} at step {step}"
FLAGS = ["--enable-high-availability", "--enable-hbmfault-repair", "--enable-worker-reboot"]
MODEL_FLAGS = "--num-layers 4 --hidden-size 256 --ffn-hidden-size 1024"
# A lost node counts as lost after 3 s without its launcher's beat, and its ranks as lost 3 s after a backup
# controller took over without them: both well before a new node's workers could register (as in
# tests/e2e/test_node0_replaced.py).
LAUNCH_FLAGS = ["--controllers", "2", "--node-lost-after", "3"]
ENV = {"MINDIO_TAKEOVER_WAIT_S": "3", "MINDIO_STATUS_PORT": "0", "MINDIO_TOKEN": TOKEN}
NPROC_PER_NODE, NNODES = 2, 2
STEP_LOGGED = re.compile(r"iteration\s+(\d+)/")
RECOVERED = re.compile(r"INFO recovery \d+ on rank \d+, step \d+, .*; first step done")
RECOVERY_LINE = re.compile(r"INFO recovery \d+ on rank \d+, [^:]*: (.*)")
# A phase of a rank's recovery line and when it ended, from the fault's detection: "groups rebuilt +5.39 s"
PHASE = re.compile(r"([a-z][a-z ]*[a-z](?: \([a-z ]+\))?) \+(\d+\.\d+) s")
DECISION = re.compile(r"\] decision (\w+)")
STANDBY_READY = "standby: watching nodes"
# How long a standby that was not needed takes to see the job end and exit (node 0 waits up to 10 s for it).
STANDBY_END_S = 20.0
STALL_S = (3.0, 8.0)
# What a failed run's end is told by: the controller's decisions and state, errors, launchers' restarts.
DECISIVE = re.compile(r"\] (decision|state) |Error|exited|restart|gave up|ends the job|taking over")


@dataclass
class Fault:
    kind: str
    target: int  # a rank (kill, stall) or a node
    after_step: int  # injected once this step's loss line was seen ...
    delay: float = 0.0  # ... and this fraction of a reference step after it
    stall_s: float = 0.0
    at: Optional[float] = None  # when it was injected (time.monotonic)
    ended: Optional[float] = None  # when the stall ended or the new launcher started
    recovery_s: Optional[float] = None
    phases: Dict[str, float] = field(default_factory=dict)  # each phase's seconds on the slowest rank
    decision: str = "-"
    outcome: str = "not injected"

    def name(self) -> str:
        if self.kind == "node":
            return f"node{self.target}@{self.after_step}"
        if self.kind == "pause":
            return f"pause@{self.after_step}"
        stall = f",s={self.stall_s:g}" if self.kind == "stall" else ""
        return f"{self.kind}:rank={self.target}{stall}@{self.after_step}"


@dataclass
class Soak:
    faults: List[Fault]
    run: Optional[RunResult] = None
    launcher_codes: Dict[int, List[Optional[int]]] = field(default_factory=dict)
    ended: str = "finished"  # or "job ended: ...", "job hung: ..."
    cancelled_standbys: List[int] = field(default_factory=list)  # started as the job ended (a scheduler's race)
    lines: List[tuple] = field(default_factory=list)  # (arrival time, line)


def parse_sequence(text: str, steps: int) -> List[Fault]:
    """'node1,node0,kill:rank=2,stall:rank=1,s=5,uce:rank=3,pause,drain:rank=1' (each item may end with @STEP:
    injected after that step's line; without, the faults are spread evenly over the run)."""
    ranked = "|".join(k for k in KINDS if k not in ("node", "stall", "pause"))
    items = re.findall(rf"(node\d+|pause|(?:{ranked}):rank=\d+|stall:rank=\d+(?:,s=[\d.]+)?)(?:@(\d+))?(?:,|$)",
                       text)
    if ",".join(a + (f"@{b}" if b else "") for a, b in items) != text.replace(" ", ""):
        raise SystemExit(f"chaos: bad --sequence {text!r}: items are nodeN, pause, stall:rank=R[,s=S] and "
                         f"KIND:rank=R for KIND in {ranked.replace('|', ', ')}, each optionally @STEP, separated by "
                         f"commas")
    spread = _spread(len(items), steps)
    faults = []
    for (item, step), default_step in zip(items, spread):
        after = int(step) if step else default_step
        if item.startswith("node"):
            fault = Fault("node", int(item[4:]), after)
        elif item == "pause":
            fault = Fault("pause", -1, after)
        else:
            kind, rest = item.split(":", 1)
            values = dict(part.split("=") for part in rest.split(","))
            fault = Fault(kind, int(values["rank"]), after, stall_s=float(values.get("s", 5)))
        faults.append(_checked(fault, steps))
    return faults


def _checked(fault: Fault, steps: int) -> Fault:
    limit = NNODES if fault.kind == "node" else NNODES * NPROC_PER_NODE
    targeted = fault.kind != "pause"
    if (targeted and not 0 <= fault.target < limit) or not 1 <= fault.after_step < steps:
        raise SystemExit(f"chaos: {fault.name()}: the target must be below {limit} and the step in 1..{steps - 1}")
    return fault


def _spread(count: int, steps: int) -> List[int]:
    """Steps for `count` faults, evenly over the run, clear of its first and last few steps."""
    first, last = min(5, steps // 4), steps - max(3, steps // 10)
    return [first + (last - first) * i // max(count, 1) for i in range(count)]


def random_plan(seed: int, kinds: Sequence[str], node0: bool, count: int, steps: int) -> List[Fault]:
    """`count` faults of `kinds`, one at a random step of each of `count` equal slices of the run."""
    rng = random.Random(seed)
    bounds = _spread(count, steps) + [steps - max(3, steps // 10)]
    faults = []
    for lo, hi in zip(bounds, bounds[1:]):
        kind = rng.choice(kinds)
        after = rng.randint(lo, max(lo, hi - max(1, (hi - lo) // 3)))  # not its last third: room to recover
        if kind == "node":
            target = rng.randrange(NNODES) if node0 else rng.randrange(1, NNODES)
        elif kind == "pause":
            target = -1
        else:
            target = rng.randrange(NNODES * NPROC_PER_NODE)
        stall_s = round(rng.uniform(*STALL_S), 1) if kind == "stall" else 0.0
        faults.append(Fault(kind, target, after, delay=round(rng.random(), 2), stall_s=stall_s))
    return faults


class Log:
    """Every line of the job with its arrival time, and the highest step logged so far."""

    def __init__(self):
        self.lines: List[tuple] = []
        self.top_step = 0
        self.status_ports: List[int] = []  # every controller's status server, in the order they said so
        self.changed = threading.Condition()

    def __call__(self, line: str) -> None:
        with self.changed:
            self.lines.append((time.monotonic(), line))
            page = STATUS_PAGE.search(line)
            if page:
                self.status_ports.append(int(page.group(1)))
            logged = STEP_LOGGED.search(line)
            if logged:
                self.top_step = max(self.top_step, int(logged.group(1)))
                self.changed.notify_all()

    def wait_for_step(self, step: int, cluster: LocalCluster, quiet_limit: float) -> str:
        """'' once `step` was logged; else why not: the job ended, or logged no step for `quiet_limit` s."""
        with self.changed:
            last_progress, seen = time.monotonic(), self.top_step
            while self.top_step < step:
                if all(p.poll() is not None for p in cluster.launchers if p not in cluster.lost):
                    return "job ended"
                if self.top_step != seen:
                    last_progress, seen = time.monotonic(), self.top_step
                if time.monotonic() - last_progress > quiet_limit:
                    return f"hung: no step logged for {quiet_limit:g} s after step {self.top_step}"
                self.changed.wait(1.0)
        return ""

    def wait_for_line(self, text: str, timeout: float) -> Optional[float]:
        """When the first line holding `text` arrived, waiting up to `timeout` s for it; None if it never did."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = next((t for t, line in self.lines if text in line), None)
                if found is not None or time.monotonic() > deadline:
                    return found
                self.changed.wait(1.0)


def play(faults: List[Fault], steps: int, model_flags: Sequence[str] = (), step_s: float = 0.6,
         replace_after: float = 3.0, quiet_limit: float = 300.0, flags: Sequence[str] = FLAGS,
         spare_workers: int = 0, standby: bool = False) -> Soak:
    """Train `steps` steps on two nodes, injecting `faults` in order; every launcher's exit code is kept
    (node -> its launchers' codes, in start order; "standby": the standby that was not needed). `spare_workers`:
    warm workers per launcher (a killed rank's replacement is one of them, its imports and model build done).
    `standby`: a standby launcher beside the job, which takes the place of a lost node."""
    log = Log()
    launch_flags = [*LAUNCH_FLAGS, *(["--spare-workers", str(spare_workers)] if spare_workers else [])]
    workdir = tempfile.mkdtemp(prefix="mindio-chaos-")  # the planned faults' markers, the flips' checkpoints
    env, more_flags = planned(faults, workdir)
    cluster = LocalCluster([*flags, *model_flags, *more_flags], nnodes=NNODES, nproc_per_node=NPROC_PER_NODE,
                           train_iters=steps, env={**ENV, **env}, launch_flags=launch_flags, on_line=log)
    soak = Soak(faults)
    nodes = {node: [cluster.start_node("--node-rank", str(node))] for node in range(NNODES)}
    if standby:
        nodes["standby"] = [cluster.start_node("--standby")]
    stopped = ""  # why the faults left were not injected
    for fault in faults:
        stopped = log.wait_for_step(fault.after_step, cluster, quiet_limit)
        if stopped:
            break
        if fault.kind in PLANNED:
            _await_planned(fault, log, quiet_limit)
        elif fault.kind in OPERATOR:
            time.sleep(fault.delay * step_s)
            _operate(fault, log)
        else:
            time.sleep(fault.delay * step_s)
            _inject(fault, cluster, nodes, replace_after)
        print(f"  {time.strftime('%H:%M:%S')} {fault.name()}: {fault.outcome}", flush=True)
    try:
        deadline = time.monotonic() + quiet_limit + (0 if stopped else steps * step_s * 4)
        soak.cancelled_standbys = _cancel_standbys_the_job_ended_without(nodes, cluster, deadline)
        soak.run = cluster.wait(timeout=max(1.0, deadline - time.monotonic()))
        if soak.run.returncode != 0:
            soak.ended = f"job ended: exit {soak.run.returncode}" + (f" ({stopped})" if "hung" in stopped else "")
    except AssertionError as hung:  # killed by wait: the job neither finished nor ended
        soak.ended = f"job hung: {stopped or str(hung).splitlines()[0]}"
        soak.run = RunResult(-1, "".join(cluster.lines))
    soak.launcher_codes = {node: [p.returncode for p in procs] for node, procs in nodes.items()}
    soak.lines = log.lines
    _judge(soak)
    return soak


def planned(faults: Sequence[Fault], workdir: str) -> tuple:
    """The environment and flags that plan the faults injected by the ranks themselves: MINDIO_FAULT_INJECT
    (each in the step after its `after_step`, a uce or hang in the phase its delay picks, a flip once the update
    is final) with its markers in `workdir`, and, for a flip, periodic checkpoints there."""
    specs = []
    for f in faults:
        if f.kind not in PLANNED:
            continue
        phase = "completed" if f.kind == "flip" else PHASES[min(int(f.delay * len(PHASES)), len(PHASES) - 1)]
        message = ",msg=UCE ERROR injected by the chaos soak" if f.kind == "uce" else ""
        specs.append(f"{_injected_kind(f)}:rank={f.target},step={f.after_step + 1},phase={phase}{message}")
    if not specs:
        return {}, []
    env = {"MINDIO_FAULT_INJECT": ";".join(specs), "MINDIO_FAULT_STATE_DIR": os.path.join(workdir, "faults")}
    flips = any(f.kind == "flip" for f in faults)
    saves = ["--save", os.path.join(workdir, "ckpt"), "--save-interval", str(FLIP_SAVE_INTERVAL)] if flips else []
    return env, saves


def _injected_kind(fault: Fault) -> str:
    """The MINDIO_FAULT_INJECT kind of a planned fault (a memory error is a raise with its message)."""
    return "raise" if fault.kind == "uce" else fault.kind


def _await_planned(fault: Fault, log: Log, timeout: float) -> None:
    """A planned fault fires by itself in its step: its time is that of the rank's line saying so."""
    fired = FIRED.format(kind=_injected_kind(fault), rank=fault.target, step=fault.after_step + 1)
    fault.at = log.wait_for_line(fired, timeout)
    fault.ended = fault.at
    fault.outcome = "injected" if fault.at is not None else "never fired"


def _operate(fault: Fault, log: Log) -> None:
    """The operator's pause or drain, asked of the leading controller (its status server) as the CLI does."""
    port = _leading_status_server(log.status_ports)
    if port is None:
        fault.outcome = "no status server answered"
        return
    server = ["--controller", f"127.0.0.1:{port}", "--token", TOKEN]
    argv = (["pause", *server, "--hold", f"{PAUSE_S:g}", "--wait", "60"] if fault.kind == "pause" else
            ["drain", *server, "--rank", str(fault.target), "--wait", "120"])
    asked = time.monotonic()
    code, said = _cli(argv)
    # refused while another action or a recovery runs: asked again, as an operator would
    while code != 0 and "refused" in str(code) and time.monotonic() < asked + OPERATOR_RETRY_S:
        time.sleep(1.0)
        code, said = _cli(argv)
    if code != 0:
        fault.outcome = f"{fault.kind} refused or failed ({code}): {said.strip()[-300:]}"
        return
    fault.at, fault.ended, fault.outcome = asked, time.monotonic(), "injected"


def _leading_status_server(ports: Sequence[int]) -> Optional[int]:
    """The port of the controller that leads (its term is 1 or more), the latest first; None if none answers."""
    from mindio_adaptor.cli.status_client import request_json

    for port in reversed(ports):
        try:
            if request_json(f"127.0.0.1:{port}", TOKEN, "/status.json")["term"] >= 1:
                return port
        except SystemExit:  # that controller is gone with its node
            continue
    return None


def _cli(argv: List[str]) -> tuple:
    """`mindio-adaptor ARGV` in this process: its exit code and what it printed."""
    from mindio_adaptor.cli import main as cli_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = cli_main(argv)
        except SystemExit as err:
            code = err.code
    return code, out.getvalue()


def _inject(fault: Fault, cluster: LocalCluster, nodes: Dict[int, list], replace_after: float) -> None:
    fault.outcome = "injected"
    if fault.kind == "node":
        fault.at = time.monotonic()
        cluster.lose_node(nodes[fault.target][-1])
        waiting = nodes.get("standby", [])
        # A standby takes the node's place once it watches the job (the scheduler's last one may still be
        # starting); the scheduler then sends the next one. Without one ready, the scheduler's new launcher does.
        ready = [standby for standby in waiting if cluster.said(standby, STANDBY_READY)]
        if ready:
            waiting.remove(ready[0])
            nodes[fault.target].append(ready[0])
            time.sleep(replace_after)
            if not _job_ended(nodes, cluster):  # a standby started after the end would wait for the job's store in vain
                waiting.append(cluster.start_node("--standby"))
        else:
            time.sleep(replace_after)
            nodes[fault.target].append(cluster.start_node("--node-rank", str(fault.target)))
        fault.ended = time.monotonic()
        return
    worker = cluster.worker_of(fault.target)
    if worker is None:
        fault.outcome = f"rank {fault.target} had no live worker"
        return
    fault.at = time.monotonic()
    try:
        os.kill(worker.pid, signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
        if fault.kind == "stall":
            time.sleep(fault.stall_s)
            os.kill(worker.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # a stalled worker judged hung and stopped by its launcher meanwhile
    fault.ended = time.monotonic()


def _cancel_standbys_the_job_ended_without(nodes: Dict[int, list], cluster: LocalCluster, deadline: float) -> List[int]:
    """Once every node's launcher has ended, a standby that never took a node and is still running after
    STANDBY_END_S was started as the job ended, too late to reach its store (it waits for it up to the
    rendezvous timeout): cancelled as a scheduler deletes a spare pod once the job completed, and left out of the
    job's exit codes. The job's nodes are waited for until `deadline` (monotonic), the run's one bound. Returns
    their pids."""
    job = [procs[-1] for node, procs in nodes.items() if node != "standby"]
    while any(proc.poll() is None for proc in job) and time.monotonic() < deadline:
        time.sleep(0.5)
    spares = nodes.get("standby", [])
    grace = time.monotonic() + STANDBY_END_S
    while any(proc.poll() is None for proc in spares) and time.monotonic() < grace:
        time.sleep(0.5)
    late = [proc for proc in spares if proc.poll() is None]  # a standby that took a node left this list
    for proc in late:
        spares.remove(proc)
        cluster.lose_node(proc)
        print(f"  {time.strftime('%H:%M:%S')} standby pid {proc.pid} cancelled: started as the job ended, it never "
              f"reached the job's store", flush=True)
    return [proc.pid for proc in late]


def _job_ended(nodes: Dict[int, list], cluster: LocalCluster) -> bool:
    """Every node's current launcher has exited or said its summary: node 0's stays up to 10 s longer, waiting
    for the standbys to see the end, and a standby that joins meanwhile loses the store with it."""
    return all(procs[-1].poll() is not None or cluster.said(procs[-1], "summary: ")
               for node, procs in nodes.items() if node != "standby")


def _judge(soak: Soak) -> None:
    """Each injected fault's recovery time, decision and outcome, from the lines that arrived between it and
    the next fault."""
    injected = [f for f in soak.faults if f.at is not None]
    for fault, following in zip(injected, [*injected[1:], None]):
        until = following.at if following else float("inf")
        window = [(t, line) for t, line in soak.lines if fault.at <= t < until]
        fault.decision = next((m.group(1) for _, line in window for m in [DECISION.search(line)] if m), "-")
        done = next((t for t, line in window if RECOVERED.search(line)), None)
        if done is None:
            done = next((t for t, line in window if t >= fault.ended and STEP_LOGGED.search(line)), None)
        if done is None and following is not None:
            # the next fault came before any step (a node lost during a pause): both end at the same first step
            done = next((t for t, line in soak.lines if t >= fault.ended and STEP_LOGGED.search(line)), None)
        fault.phases = slowest_phases([line for _, line in window])
        if done is not None:
            fault.recovery_s, fault.outcome = done - fault.at, "recovered"
        else:
            fault.outcome = soak.ended if soak.ended != "finished" else "no step after it"


def slowest_phases(lines: Sequence[str]) -> Dict[str, float]:
    """Each phase of the recoveries these lines report, in seconds (from the phase before it on the same rank's
    line), the slowest rank's."""
    slowest: Dict[str, float] = {}
    for line in lines:
        found = RECOVERY_LINE.search(line)
        if not found:
            continue
        before = 0.0
        for name, at in PHASE.findall(found.group(1)):
            took, before = float(at) - before, float(at)
            slowest[name] = max(slowest.get(name, 0.0), round(took, 2))
    return slowest


def compare(soak: Soak, reference: RunResult) -> Dict[str, object]:
    """The run against the uninterrupted one: digest, every loss line, the steps logged nowhere, the
    processes left, every launcher's exit."""
    lines = loss_lines(soak.run.output)
    return {"digest_equal": soak.run.digest is not None and soak.run.digest == reference.digest,
            "loss_lines_differing": [(s, loss) for s, loss in lines if reference.losses.get(s) != loss],
            "steps_without_loss_line": sorted(set(reference.losses) - {s for s, _ in lines}),
            "processes_left": soak.run.leftover,
            "launchers_all_0": all(code == 0 for codes in soak.launcher_codes.values() for code in codes[-1:]),
            "launcher_codes": soak.launcher_codes}


def goodput(run: RunResult, lines: List[tuple]) -> float:
    """Productive step time over the time from the first step's start to the last step's line. Productive:
    the steps trained, each once, at the run's median step time (a step's logged time includes any recovery
    it followed: Megatron's interval timer ran through it)."""
    arrivals = [t for t, line in lines if STEP_LOGGED.search(line)]
    if not arrivals or not run.step_ms:
        return 0.0
    step_s = statistics.median(run.step_ms.values()) / 1000
    wall = arrivals[-1] - arrivals[0] + step_s
    return len(run.step_ms) * step_s / wall


def report(title: str, soak: Soak, reference: RunResult, reference_goodput: float) -> Dict[str, object]:
    checked = compare(soak, reference)
    start = soak.lines[0][0] if soak.lines else 0.0
    print(f"\n{title}: {soak.ended}")
    print(f"  {'fault':<24} {'at s':>6} {'decision':<10} {'recovery s':>10}  {'slowest phase':<24} outcome")
    for f in soak.faults:
        shown = "-" if f.recovery_s is None else f"{f.recovery_s:.1f}"
        at = "-" if f.at is None else f"{f.at - start:.0f}"
        slowest = max(f.phases.items(), key=lambda item: item[1], default=None)
        phase = "-" if slowest is None else f"{slowest[0]} {slowest[1]:.2f}"
        print(f"  {f.name():<24} {at:>6} {f.decision:<10} {shown:>10}  {phase:<24} {f.outcome}")
    injected = [f for f in soak.faults if f.at is not None]
    recovered = [f for f in injected if f.outcome == "recovered"]
    ratio = goodput(soak.run, soak.lines) / reference_goodput if soak.ended == "finished" else 0.0
    print(f"  digest equal: {checked['digest_equal']}; loss lines differing: {checked['loss_lines_differing'][:5]} "
          f"({len(checked['loss_lines_differing'])}); steps without a loss line: {checked['steps_without_loss_line']}")
    print(f"  launchers' exits: {checked['launcher_codes']}; processes left: {checked['processes_left'] or 'none'}")
    print(f"  faults recovered with no operator: {len(recovered)}/{len(injected)}; goodput ratio to the fault-free "
          f"run: {ratio:.3f}")
    if soak.ended != "finished" or len(recovered) < len(injected) or not checked["digest_equal"]:
        failed = next((f.at for f in injected if f.outcome != "recovered"), None) or start
        decisive = [line.rstrip()[:300] for t, line in soak.lines if t >= failed and DECISIVE.search(line)]
        print("  its decisive lines from the first fault not recovered:\n    " +
              "\n    ".join(decisive[:10] + (["..."] if len(decisive) > 14 else []) + decisive[10:][-4:]))
    return {**checked, "faults": soak.faults, "injected": len(injected), "recovered": len(recovered),
            "goodput_ratio": ratio, "ended": soak.ended}


def reference_run(steps: int, model_flags: Sequence[str]) -> tuple:
    soak = play([], steps, model_flags)
    if soak.ended != "finished" or soak.run.digest is None:
        raise SystemExit(f"chaos: the fault-free reference run failed ({soak.ended}):\n{soak.run.output[-4000:]}")
    rate = goodput(soak.run, soak.lines)
    wall = soak.lines[-1][0] - soak.lines[0][0]
    median_s = statistics.median(soak.run.step_ms.values()) / 1000
    print(f"reference: {steps} steps, median step {median_s:.2f} s, training goodput {rate:.3f}, {wall:.0f} s "
          f"of output, processes left: {soak.run.leftover or 'none'}")
    return soak.run, rate, median_s


def _seeds(text: str) -> List[int]:
    """'1-10', '4,10' or both mixed: '1-3,7'."""
    seeds = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=_seeds, help="seeds, e.g. 1-10 or 4,10 (one run each)")
    parser.add_argument("--faults", default=",".join(KINDS), help=f"kinds to draw from: {', '.join(KINDS)}")
    parser.add_argument("--node0", action="store_true", help="node faults may take node 0 (the stores' host)")
    parser.add_argument("--count", type=int, help="faults per run (default: one per --every s of training)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds of fault-free training per fault")
    parser.add_argument("--sequence", help="a fixed list of faults instead, e.g. node1,node0,kill:rank=2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-s", type=float, default=0.6, help="the step time a plan assumes (a seed gives one "
                        "plan whatever the machine's speed): faults per run = steps * step-s / every")
    parser.add_argument("--model-flags", default=MODEL_FLAGS, help=f"Megatron flags of the model ({MODEL_FLAGS})")
    parser.add_argument("--replace-after", type=float, default=3.0, help="seconds from a node's loss to its new "
                        "launcher")
    parser.add_argument("--spare-workers", type=int, default=0, help="warm workers kept by each launcher "
                        "(mindio-adaptor launch --spare-workers): a killed rank is replaced by one of them")
    parser.add_argument("--standby", action="store_true", help="a standby launcher (mindio-adaptor launch --standby) "
                        "beside the job, its workers warm, takes the place of a lost node")
    parser.add_argument("--log-dir", help="keep each run's whole output there")
    args = parser.parse_args(argv)
    kinds = args.faults.split(",")
    if not kinds or not set(kinds) <= set(KINDS):
        parser.error(f"--faults {args.faults!r}: kinds are {', '.join(KINDS)}")
    model_flags = args.model_flags.split()
    reference, reference_rate, step_s = reference_run(args.steps, model_flags)
    count = args.count or max(1, round(args.steps * args.step_s / args.every))
    plans = {f"sequence {args.sequence}": parse_sequence(args.sequence, args.steps)} if args.sequence else {
        f"seed {seed}": random_plan(seed, kinds, args.node0, count, args.steps) for seed in args.seeds or [args.seed]}
    results = {}
    for title, faults in plans.items():
        print(f"\n{title}: {', '.join(f.name() for f in faults)}", flush=True)
        soak = play(faults, args.steps, model_flags, step_s, args.replace_after, spare_workers=args.spare_workers,
                    standby=args.standby)
        if args.log_dir:
            os.makedirs(args.log_dir, exist_ok=True)
            with open(os.path.join(args.log_dir, re.sub(r"\W+", "_", title) + ".log"), "w") as out:
                out.write(soak.run.output)
        results[title] = report(title, soak, reference, reference_rate)
        sys.stdout.flush()
    return summary(results)


def print_phases(results: Dict[str, Dict[str, object]]) -> None:
    """Per kind, each recovery phase's median and worst (the slowest rank's), over every fault of that kind; a
    worst case over 3x its median (and over 1 s) is marked for an explanation."""
    by_kind: Dict[str, Dict[str, List[float]]] = {}
    for r in results.values():
        for f in r["faults"]:
            for name, took in f.phases.items():
                by_kind.setdefault(f.kind, {}).setdefault(name, []).append(took)
    for kind, phases in sorted(by_kind.items()):
        parts = []
        for name, times in phases.items():
            median, worst = statistics.median(times), max(times)
            mark = " (!)" if worst > 3 * median and worst > 1.0 else ""
            parts.append(f"{name} {median:.2f}/{worst:.2f}{mark}")
        print(f"  {kind:<6} phases, median/worst s: {'; '.join(parts)}")


def summary(results: Dict[str, Dict[str, object]]) -> int:
    injected = sum(r["injected"] for r in results.values())
    recovered = sum(r["recovered"] for r in results.values())
    print(f"\nsummary over {len(results)} run(s): {recovered}/{injected} faults recovered with no operator")
    times: Dict[str, List[float]] = {}
    for r in results.values():
        for f in r["faults"]:
            if f.recovery_s is not None:
                times.setdefault(f.kind, []).append(f.recovery_s)
    for kind, seconds in sorted(times.items()):
        print(f"  {kind:<6} {len(seconds)} recovered: {min(seconds):.1f}-{max(seconds):.1f} s, median "
              f"{statistics.median(seconds):.1f} s")
    print_phases(results)
    ratios = [r["goodput_ratio"] for r in results.values() if r["ended"] == "finished"]
    if ratios:
        print(f"  goodput ratio to the fault-free run: {', '.join(f'{x:.3f}' for x in ratios)} (mean "
              f"{statistics.mean(ratios):.3f})")
    failed = [title for title, r in results.items() if not (
        r["ended"] == "finished" and r["digest_equal"] and not r["loss_lines_differing"] and not r["processes_left"]
        and r["launchers_all_0"] and r["recovered"] == r["injected"])]
    for title in failed:
        print(f"  FAILED {title}: {', '.join(f.name() for f in results[title]['faults'])} ({results[title]['ended']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
