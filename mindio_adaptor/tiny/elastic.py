"""Elastic training on local launchers, as the e2e tests and `mindio-adaptor demo --scenario elastic` run
it: the tiny GPT at dp4 (R = 2) on two `mindio-adaptor launch` nodes of two ranks each. Node 1 is lost
after step `lose_after`; node 0's launcher proves it gone and no standby waits, so nothing will replace
its ranks (launch/unreplaced_nodes): the job scales in to dp2 at once, whatever MINDIO_ARF_WAIT_S says.
With `return_at`, a new launcher of node 1 starts once the job scaled in, and the job scales out to dp4
again at that step.

Two steps wait for the test (the example's --hold-before-step, which changes no result): the step after
`lose_after` until node 1 is lost, so the loss comes after that step however late its log line is read;
and step `return_at` until the controller decides the scale-out, so the returned ranks' start-up always
fits in the run. A held step is long: the hang rule gets a fixed step limit (MINDIO_STEP_TIMEOUT_S).

With `kill_after` (a second fault while scaled in), the process of `kill_rank` on node 0 is SIGKILLed once
step `kill_after` is logged at the smaller size, while the survivors wait before the next step. With a
return as well, the returning nodes start once the job scaled in again after that loss (the killed rank's
launcher starts it again by itself: a return too).

With `partial_return` as well, the returning nodes start only once the job scaled out part of the way with
the killed rank alone (its launcher started it again; the controller waited MINDIO_SCALE_OUT_WAIT_S for the
rest, `scale_out_wait_s`), and step `return_at + 1` waits for the second, whole scale-out.

With `lost_node` another node than node 1 is lost; with `returning_nodes` new launchers of several nodes
start once the job scaled in: the lost node's, and those of nodes whose launchers ended because their
workers left the job with their data-parallel slice (tp2 across one-rank nodes: the lost rank's TP peer).
Such a node's launcher must have ended before its new one starts (it owns its node rank until then).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from mindio_adaptor.tiny.job import LocalCluster, RunResult

FLAGS = ["--enable-high-availability", "--enable-worker-reboot", "--enable-elastic-training", "--log-sample-ids"]
HELD_STEP_LIMIT_S = "300"
# With a return: how long the controller waits, from the first return, for every returned rank to be ready
# (MINDIO_SCALE_OUT_WAIT_S). Their start-up takes 3 s on a quiet machine and over 20 s on two busy cores; a
# returned set sent away would leave the held step waiting out HELD_STEP_LIMIT_S, so this stays well inside it.
SCALE_OUT_WAIT_S = "180"
_STEP_LOGGED = re.compile(r"iteration\s+(\d+)/")
_SAMPLE_IDS = re.compile(r"sample ids step (\d+) rank \d+: ([\d,-]+)")
_STARTED = re.compile(r"rank (\d+) pid (\d+) starting")


def samples_by_step(output: str) -> Dict[int, Set[str]]:
    """The dataset indices each step's micro-batches named (the example's --log-sample-ids), on any rank;
    a step stopped and computed again names its samples twice, the same ones."""
    seen: Dict[int, Set[str]] = defaultdict(set)
    for step, ids in _SAMPLE_IDS.findall(output):
        seen[int(step)].update(ids.split(","))
    return dict(seen)


def run_elastic(workdir: Path, lose_after: int = 4, return_at: Optional[int] = None, arf_wait_s: Optional[float] = 15,
                train_iters: int = 8, on_line: Optional[Callable[[str], None]] = None,
                timeout: float = 400, flags: Sequence[str] = (), kill_after: Optional[int] = None,
                kill_rank: int = 1, nproc_per_node: int = 2, lost_node: int = 1,
                returning_nodes: Optional[Sequence[int]] = None,
                also_lost: Sequence[int] = (), env: Optional[Dict[str, str]] = None, partial_return: bool = False,
                scale_out_wait_s: str = "") -> Tuple[RunResult, List[int]]:
    """The run and the pids lost with the lost node (and the process of `kill_rank`, with `kill_after`); the
    whole log is kept as workdir/output.txt. `arf_wait_s` None: MINDIO_ARF_WAIT_S is left at its default. `flags`: more of the script's (they come last, so `--save-interval N`
    replaces the default's 1000). `nproc_per_node`: the four ranks on two nodes of two, or on four of one
    (node 1 then holds rank 1 alone). `lost_node`: the node lost after `lose_after`; `returning_nodes`: the
    nodes started again once the job scaled in, with `return_at` (default: the lost node alone); `also_lost`:
    nodes lost at the same moment (no return); `env`: more of the launchers' environment (e.g. the PYTHONPATH of
    another Megatron release). The run's `launcher_codes` name each node's launchers' exit codes, in start
    order."""
    if not 1 <= lose_after < train_iters or (return_at is not None and not lose_after + 1 < return_at <= train_iters):
        raise ValueError(f"node 1 lost after step {lose_after} and back at step {return_at} do not fit "
                         f"{train_iters} steps: 1 <= lose after < return - 1 < return <= steps")
    if kill_after is not None and not lose_after < kill_after < (train_iters if return_at is None else return_at - 1):
        raise ValueError(f"a second fault after step {kill_after} needs the job scaled in then and not back: "
                         f"lose after {lose_after} < kill after < steps {train_iters}, and kill after + 1 < return "
                         f"at {return_at}")
    nnodes = 4 // nproc_per_node
    returning = [lost_node] if returning_nodes is None else list(returning_nodes)
    if not 0 < lost_node < nnodes or lost_node not in returning or not set(returning) <= set(range(1, nnodes)):
        raise ValueError(f"lost node {lost_node} and returning nodes {returning} must be nodes 1..{nnodes - 1} "
                         f"(node 0 hosts the launchers' store), the lost node among those returning")
    if partial_return and (kill_after is None or return_at is None or return_at + 1 > train_iters):
        raise ValueError("a partial return needs a killed rank (kill_after), a return (return_at) and a step after it")
    if also_lost and (return_at is not None or lost_node in also_lost
                      or not set(also_lost) <= set(range(1, nnodes))):
        raise ValueError(f"nodes {list(also_lost)} lost with node {lost_node} must be other nodes of 1..{nnodes - 1}, "
                         f"and none returns")
    workdir.mkdir(parents=True, exist_ok=True)
    lost_file, returned_file = workdir / f"node_{lost_node}_lost", workdir / f"node_{lost_node}_returned"
    killed_file, all_returned_file = workdir / f"rank_{kill_rank}_killed", workdir / "all_returned"
    for marker in (lost_file, returned_file, killed_file, all_returned_file):
        marker.unlink(missing_ok=True)
    step_done, second_step_done = threading.Event(), threading.Event()
    scaled_in = [threading.Event(), threading.Event()]  # the first scale-in, and a second one
    scaled_out = threading.Event()  # the first scale-out (with partial_return: part of the way)
    pids: Dict[int, int] = {}

    def watch(line: str) -> None:
        logged = _STEP_LOGGED.search(line)
        if logged and int(logged.group(1)) == lose_after:
            step_done.set()
        if logged and int(logged.group(1)) == kill_after:
            second_step_done.set()
        started = _STARTED.search(line)
        if started:
            pids[int(started.group(1))] = int(started.group(2))
        if "elastic training: scaled in dp" in line:
            scaled_in[scaled_in[0].is_set()].set()
        if "elastic training: scaling out with ranks" in line:
            (all_returned_file if scaled_out.is_set() else returned_file).touch()
        if "elastic training: scaled out dp" in line:
            scaled_out.set()
        if on_line is not None:
            on_line(line)

    holds, files = [lose_after + 1], [lost_file]
    if return_at is not None:
        holds, files = holds + [return_at], files + [returned_file]
    if kill_after is not None:
        holds, files = holds + [kill_after + 1], files + [killed_file]
    if partial_return:
        holds, files = holds + [return_at + 1], files + [all_returned_file]
    cluster = LocalCluster([*FLAGS, "--save", str(workdir / "ckpt"), "--save-interval", "1000",
                            "--hold-before-step", *map(str, holds), "--hold-until-file", *map(str, files), *flags],
                           nnodes=nnodes, nproc_per_node=nproc_per_node, train_iters=train_iters,
                           on_line=watch,
                           env={"MINDIO_STEP_TIMEOUT_S": HELD_STEP_LIMIT_S,
                                "MINDIO_SCALE_OUT_WAIT_S": scale_out_wait_s or SCALE_OUT_WAIT_S,
                                **({} if arf_wait_s is None else {"MINDIO_ARF_WAIT_S": f"{arf_wait_s:g}"}),
                                **(env or {})})
    launchers = {node: [cluster.start_node("--node-rank", str(node))] for node in range(nnodes)}
    try:
        cluster.wait_for(step_done, f"step {lose_after}")
        lost = cluster.lose_node(launchers[lost_node][0])
        for node in also_lost:
            lost += cluster.lose_node(launchers[node][0])
        lost_file.touch()
        if kill_after is not None:
            cluster.wait_for(second_step_done, f"step {kill_after}")
            os.killpg(pids[kill_rank], signal.SIGKILL)  # the worker leads its process group (LocalCluster.lose_node)
            lost.append(pids[kill_rank])
            killed_file.touch()
        if return_at is not None:
            cluster.wait_for(scaled_in[kill_after is not None], "the scale-in")
            if partial_return:
                cluster.wait_for(scaled_out, "the partial scale-out")
            for node in returning:
                _wait_for_the_end_of(cluster, launchers[node][-1], node)
                launchers[node].append(cluster.start_node("--node-rank", str(node)))
        run = cluster.wait(timeout)
    finally:  # the whole log, kept on a failure too (an assertion shows only its end)
        (workdir / "output.txt").write_text("".join(cluster.lines))
    run.launcher_codes = {node: [proc.returncode for proc in procs] for node, procs in launchers.items()}
    return run, lost


def _wait_for_the_end_of(cluster: LocalCluster, launcher, node: int, timeout: float = 120) -> None:
    """A returning node's launcher that was not lost ends once its workers left the job (with their slice)."""
    try:
        launcher.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        cluster.kill()
        raise AssertionError(f"node {node}'s launcher still runs {timeout:g} s after the scale-in, so no new one "
                             f"can take its node rank:\n" + "".join(cluster.lines)[-6000:]) from None
