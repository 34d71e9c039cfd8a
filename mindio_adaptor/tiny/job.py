"""Launches the example GPT pretraining on local processes and reads what it printed.

Used by the end-to-end tests, the benchmarks and the demo: a tiny model (2 layers, hidden 64) that
the real megatron.training trains on CPU processes with gloo in seconds.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pretrain_gpt.py"
BENCH = EXAMPLE.parent.parent / "bench"

TINY_GPT_FLAGS = [
    "--distributed-backend", "gloo", "--transformer-impl", "local", "--use-cpu-initialization",
    "--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-masked-softmax-fusion",
    "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion",
    "--tokenizer-type", "NullTokenizer", "--vocab-size", "128", "--mock-data",
    "--position-embedding-type", "learned_absolute", "--attention-dropout", "0", "--hidden-dropout", "0",
    "--use-distributed-optimizer", "--num-layers", "2", "--hidden-size", "64",
    "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
    "--micro-batch-size", "2", "--global-batch-size", "16", "--lr", "1e-3", "--log-interval", "1",
    "--eval-iters", "0", "--eval-interval", "1000", "--seed", "1234",
    # Samples are read in the rank's process: Megatron's default, two forked loader workers per rank, adds eight
    # processes to each 4-rank run on a 2-core machine and changes no batch (the same digest, measured).
    # tests/e2e/test_process_replacement.py keeps them, for a replacement rank whose loader has workers.
    "--num-workers", "0",
]

# The environment of every process of a tiny job. TORCH_COMPILE_DISABLE: Megatron's set_jit_fusion_options
# warms up its torch.compile'd fusions (bias+GeLU, bias+dropout+add) whatever the flags say, and the tiny job
# turns those fusions off (TINY_GPT_FLAGS), so no step calls them; compiling them with inductor on the CPU
# cost each 4-process run about 15 CPU-seconds of its ~46 (7-8 s of wall time on two cores, measured). Run
# eagerly, the warm-up draws other random numbers than compiled, so parameters differ from a run without it:
# every run compared with another must have this environment (run_training and LocalCluster give it).
# With it, patch_all() also spares each process the compiler's imports (core/process/compile_switch).
# PET_FORK_WORKERS: `mindio-adaptor launch` forks the workers from a template process that imported torch and
# Megatron once (--fork-workers), as FORKED_TORCHRUN does for torchrun: a tiny job's start is mostly imports.
JOB_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TORCH_COMPILE_DISABLE": "1", "PET_FORK_WORKERS": "1"}
FORKED_TORCHRUN = ("mindio_adaptor.tiny.forked_torchrun",)

_ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([\d.]+)"
                        r".*?lm loss: ([\d.E+-]+).*?grad norm: ([\d.]+)")
_NUM_ZEROS = re.compile(r"iteration\s+(\d+)/.*?num zeros: ([\d.]+)")
_DIGEST = re.compile(r"^params digest ([0-9a-f]{64})$", re.M)
# The in-job controller's status page, as rank 0 logs it (MINDIO_STATUS_PORT=0 picks the port).
STATUS_PAGE = re.compile(r"status page at http://127\.0\.0\.1:(\d+)/")
_CONTROLLER_LINE = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\] \[mindio \w+\] \[controller rank 0\] "


def controller_said_at(output: str, says: str) -> Optional[float]:
    """When (seconds since the epoch, by its own clock) the in-job controller first logged a line whose text
    matches the regex `says`; None when it never did."""
    from datetime import datetime

    m = re.search(_CONTROLLER_LINE + says, output, re.M)
    return None if m is None else datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()


# Every run's leftover processes, for a test suite to check once per module (tests/e2e/conftest.py).
LEFTOVERS: List[str] = []


@dataclass
class RunResult:
    returncode: int
    output: str
    losses: Dict[int, float] = field(default_factory=dict)
    loss_line_steps: List[int] = field(default_factory=list)  # the step of every loss line, in order: once each
    grad_norms: Dict[int, float] = field(default_factory=dict)
    step_ms: Dict[int, float] = field(default_factory=dict)
    num_zeros: Dict[int, float] = field(default_factory=dict)
    digest: Optional[str] = None
    leftover: List[str] = field(default_factory=list)  # processes of the run still alive after it ended
    launcher_codes: Dict[int, List[Optional[int]]] = field(default_factory=dict)  # node -> its launchers' exits

    def require_success(self) -> "RunResult":
        if self.returncode != 0:
            raise AssertionError(f"training exited {self.returncode}; last output:\n{self.output[-6000:]}")
        return self


def params_digest(model_chunks) -> str:
    """In the training processes: SHA-256 over every parameter's bytes on every rank, in rank order
    (a collective over the world; the line `params digest <hex>` compares runs for bit-identity)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for chunk in model_chunks:
        for name, param in sorted(chunk.named_parameters()):
            h.update(name.encode())
            h.update(param.detach().float().cpu().contiguous().numpy().tobytes())
    local = torch.tensor(list(h.digest()), dtype=torch.uint8)
    gathered = [torch.empty_like(local) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, local)
    return hashlib.sha256(b"".join(bytes(t.tolist()) for t in gathered)).hexdigest()


_PIDS = re.compile(r"rank (\d+) pid (\d+) (starting|done)")
# A warm spare that ran the script ahead started before it had a rank (its own start line says "rank ?"): it
# starts as a rank where it takes one (core/layout/warm_assignment).
_WARM_TAKES = re.compile(r"\[mindio-warm pid (\d+)\] takes rank (\d+)")


def process_ids(output: str) -> Dict[int, Dict[str, List[int]]]:
    """rank -> {"starting": [pid, ...], "done": [pid, ...]} from the example's start and end lines: one
    pid per rank when no process was restarted."""
    seen: Dict[int, Dict[str, List[int]]] = {}
    starts = [(m.start(), m.group(1), m.group(2), m.group(3)) for m in _PIDS.finditer(output)]
    starts += [(m.start(), m.group(2), m.group(1), "starting") for m in _WARM_TAKES.finditer(output)]
    for _, rank, pid, when in sorted(starts):
        seen.setdefault(int(rank), {}).setdefault(when, []).append(int(pid))
    return seen


def kept_one_process(seen: Dict[int, Dict[str, List[int]]], rank: int) -> bool:
    """Whether `rank` ran in one process from its start to its end, by process_ids' record `seen`."""
    return len(seen[rank]["starting"]) == 1 and seen[rank]["done"] == seen[rank]["starting"]


def loss_lines(output: str) -> List[Tuple[int, float]]:
    """Every loss line of the output, in order, as (step, loss): a step logged twice appears twice."""
    return [(int(m.group(1)), float(m.group(3))) for m in _ITERATION.finditer(output)]


def parse_output(returncode: int, output: str) -> RunResult:
    result = RunResult(returncode, output)
    for m in _ITERATION.finditer(output):
        step = int(m.group(1))
        result.loss_line_steps.append(step)
        result.step_ms[step] = float(m.group(2))
        result.losses[step] = float(m.group(3))
        result.grad_norms[step] = float(m.group(4))
    for m in _NUM_ZEROS.finditer(output):
        result.num_zeros[int(m.group(1))] = float(m.group(2))
    digest = _DIGEST.search(output)
    result.digest = digest.group(1) if digest else None
    return result


def run_training(flags: Sequence[str], nproc: int = 4, train_iters: int = 8, timeout: float = 300,
                 env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                 on_line: Optional[Callable[[str], None]] = None, script: Optional[str] = None,
                 launcher: Sequence[str] = FORKED_TORCHRUN) -> RunResult:
    """Run the example (or another entry `script` taking the same flags) with the tiny GPT flags plus `flags`
    under `launcher`, a module and its options: by default torchrun with its workers forked from a template
    (tiny/forked_torchrun); ("torch.distributed.run",) for plain torchrun, ("mindio_adaptor.launch",
    "--max-restarts", "1") for ours. Never waits past timeout; `on_line` sees every output line."""
    command = [sys.executable, "-m", *launcher, "--standalone",
               f"--nproc-per-node={nproc}", str(script or EXAMPLE), *TINY_GPT_FLAGS,
               "--train-iters", str(train_iters), *flags]
    run_id = uuid.uuid4().hex
    full_env = {**os.environ, **JOB_ENV, RUN_ID_ENV: run_id, **(env or {})}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, cwd=cwd, start_new_session=True)
    lines: List[str] = []
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines, on_line), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = stacks_of_run(run_id)  # before the kill: where each process of the hung run waits
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and every worker it started
        proc.wait()
        reader.join(10)
        raise hung_run_error(f"training did not finish within {timeout} s", run_id, " ".join(command),
                             "".join(lines), stacks)
    reader.join(30)
    result = parse_output(proc.returncode, "".join(lines))
    result.leftover = processes_left(run_id)
    LEFTOVERS.extend(f"{' '.join(flags)[:120]}: {p}" for p in result.leftover)
    return result


RUN_ID_ENV = "MINDIO_TINY_JOB_RUN"  # marks every process a run starts, whatever session it moves to


def stacks_of_run(run_id: str, per_process_s: float = 20.0, total_s: float = 180.0) -> str:
    """Every thread's stack in every process of the run, for at most total_s (stacks_of)."""
    return stacks_of(_processes_of_run(run_id), per_process_s, total_s)


def stacks_of(processes, per_process_s: float = 20.0, total_s: float = 180.0) -> str:
    """Every thread's stack in each of `processes` (psutil.Process) by `py-spy dump`, when py-spy is installed,
    for at most total_s."""
    import psutil

    spy = shutil.which("py-spy")
    if spy is None:
        return "(no stacks: py-spy is not installed; `pip install py-spy` to have them here)"
    dumps, deadline = [], time.monotonic() + total_s
    for p in processes:
        if time.monotonic() > deadline:
            dumps.append(f"===== pid {p.pid}: no stacks (the {total_s:.0f} s for all of them are spent)")
            continue
        try:
            done = subprocess.run([spy, "dump", "--pid", str(p.pid)], capture_output=True, text=True,
                                  timeout=per_process_s)
            dumps.append(f"===== pid {p.pid}: {' '.join(p.cmdline())[:200]}\n{done.stdout}{done.stderr}")
        except (subprocess.TimeoutExpired, psutil.Error) as err:
            dumps.append(f"===== pid {p.pid}: no stacks ({err})")
    return "\n".join(dumps)


def hung_run_error(why: str, run_id: str, what: str, output: str, stacks: str, limit: int = 12000) -> AssertionError:
    """The error of a run killed at its timeout: a file keeps its whole output and stacks (stacks_of_run); the
    message carries the output's end and the stacks as far as `limit`, since a CI log keeps the message only."""
    report = Path(tempfile.gettempdir()) / f"mindio-hung-run-{run_id}.txt"
    report.write_text(f"{what}\n\n{output}\n\n{stacks}")
    if len(stacks) > limit:
        stacks = stacks[:limit] + f"\n... ({len(stacks) - limit} more characters)"
    return AssertionError(f"{why}; output and every process's stacks in {report}; last output:\n{output[-6000:]}\n"
                          f"{stacks}")


def _processes_of_run(run_id: str) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if p.pid != os.getpid() and p.environ().get(RUN_ID_ENV) == run_id:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def cpu_seconds_of_run(run_id: str) -> float:
    """The CPU seconds (user and system) the run's live processes used so far: a cost that a noisy machine's
    stalls, which stretch a step's wall time, do not change."""
    import psutil

    total = 0.0
    for p in _processes_of_run(run_id):
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def processes_left(run_id: str, grace_s: float = 10.0) -> List[str]:
    """Processes of the run (they carry its id in their environment) still alive `grace_s` after it
    ended, as 'pid name: command line' strings; they are killed, so one run's leftovers do not disturb
    the next."""
    import psutil

    deadline = time.monotonic() + grace_s
    left = _processes_of_run(run_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _processes_of_run(run_id)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return [f"{p.pid} {p.info['name']}: {' '.join(p.info['cmdline'] or [])[:160]}" for p in left]


def _pump(stream, lines: List[str], on_line, own: Optional[List[str]] = None):
    for line in stream:
        lines.append(line)
        if own is not None:
            own.append(line)
        if on_line is not None:
            on_line(line)


def bench_script(name: str):
    """A script of bench/ as a module: the tests play a bench's own scenarios through its code."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def load_params(directory: str, nproc: int = 4) -> List[dict]:
    import torch

    return [torch.load(os.path.join(directory, f"params_rank{r}.pt")) for r in range(nproc)]


# The launcher's lines that name a worker's pid (launch/agent): a generation's start, a rank started again, a rank
# handed over to a new process (a hot switch).
_STARTED_GROUP = re.compile(r"\] generation \d+: started ranks \[([\d, ]+)\] as pids \[([\d, ]+)\]")
_NEW_PROCESS = re.compile(r"worker reboot: rank (\d+) started again alone as pid (\d+)|"
                            r"rank (\d+) \(local rank \d+, pid \d+\) handed its rank over \(hot switch\); its new "
                            r"process is pid (\d+)")


class LocalCluster:
    """Several `mindio-adaptor launch` processes on this machine playing the nodes of one job (each launcher
    is a node: its own failure domain), with the tiny GPT flags plus `flags`. Nodes are started, lost (the
    launcher and its workers SIGKILLed) and started again by the caller; `wait` gives the merged output.
    `on_line` sees every line of every launcher."""

    def __init__(self, flags: Sequence[str], nnodes: int = 2, nproc_per_node: int = 2, train_iters: int = 8,
                 env: Optional[Dict[str, str]] = None, launch_flags: Sequence[str] = (),
                 on_line: Optional[Callable[[str], None]] = None):
        from torch.distributed.elastic.utils.distributed import get_free_port

        port = get_free_port()
        self.run_id = uuid.uuid4().hex
        self.common = ["--nnodes", str(nnodes), "--nproc-per-node", str(nproc_per_node),
                       "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", self.run_id[:12], *launch_flags]
        self.script = [str(EXAMPLE), *TINY_GPT_FLAGS, "--train-iters", str(train_iters), *flags]
        self.env = {**os.environ, **JOB_ENV, RUN_ID_ENV: self.run_id, **(env or {})}
        self.on_line = on_line
        self.lines: List[str] = []
        self.launchers: List[subprocess.Popen] = []
        self.lost: List[subprocess.Popen] = []
        self._readers: List[threading.Thread] = []
        self._lines_of: Dict[int, List[str]] = {}  # by launcher pid: its own lines

    def start_node(self, *node_flags: str, prefix: Sequence[str] = ()) -> subprocess.Popen:
        """A launcher: `start_node("--node-rank", "1")`, or `start_node("--standby")`; `prefix`: a command that runs
        it elsewhere (e.g. `ip netns exec HOST`)."""
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "mindio_adaptor.launch", *self.common, *node_flags,
                                 *self.script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self.env, start_new_session=True)
        self._lines_of[proc.pid] = []
        reader = threading.Thread(target=_pump, args=(proc.stdout, self.lines, self.on_line,
                                                      self._lines_of[proc.pid]), daemon=True)
        reader.start()
        self.launchers.append(proc)
        self._readers.append(reader)
        return proc

    def said(self, launcher: subprocess.Popen, text: str) -> bool:
        """Whether this launcher (or a worker of it) printed a line containing `text`."""
        return any(text in line for line in list(self._lines_of.get(launcher.pid, ())))

    def lose_node(self, launcher: subprocess.Popen) -> List[int]:
        """SIGKILL a launcher and everything it started (each worker leads its own process group), as a
        node that is powered off; returns the pids killed."""
        import psutil

        try:
            workers = psutil.Process(launcher.pid).children()
        except psutil.NoSuchProcess:
            workers = []
        launcher.send_signal(signal.SIGKILL)
        for worker in workers:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        launcher.wait(timeout=10)
        self.lost.append(launcher)
        return [launcher.pid, *(w.pid for w in workers)]

    def worker_of(self, rank: int):
        """The live worker process (psutil.Process) of `rank` among the running launchers' children, or None."""
        import psutil

        for launcher in self.launchers:
            if launcher in self.lost or launcher.poll() is not None:
                continue
            try:
                children = psutil.Process(launcher.pid).children()
            except psutil.NoSuchProcess:
                continue
            said = self._pid_said(launcher, rank)
            for child in children:
                try:
                    if child.status() != psutil.STATUS_ZOMBIE and (
                            child.pid == said or child.environ().get("RANK") == str(rank)):
                        return child
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        return None

    def _pid_said(self, launcher: subprocess.Popen, rank: int) -> Optional[int]:
        """The pid this launcher last said it gave `rank`: a warm worker took its rank after its start, so its
        environment (as /proc shows it) names none."""
        pid = None
        for line in list(self._lines_of.get(launcher.pid, ())):
            new = _NEW_PROCESS.search(line)
            if new:
                said_rank, said_pid = new.group(1) or new.group(3), new.group(2) or new.group(4)
                if int(said_rank) == rank:
                    pid = int(said_pid)
            group = _STARTED_GROUP.search(line)
            if group:
                ranks, pids = ([int(x) for x in text.split(",")] for text in group.groups())
                if rank in ranks:
                    pid = pids[ranks.index(rank)]
        return pid

    def wait(self, timeout: float = 400) -> RunResult:
        """Wait for every launcher not lost; the first non-zero exit code among them is the run's."""
        deadline = time.monotonic() + timeout
        running = [p for p in self.launchers if p not in self.lost]
        try:
            codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in running]
        except subprocess.TimeoutExpired:
            stacks = stacks_of_run(self.run_id)
            self.kill()
            raise hung_run_error(f"the cluster did not finish within {timeout} s", self.run_id, " ".join(self.script),
                                 "".join(self.lines), stacks)
        for reader in self._readers:
            reader.join(30)
        result = parse_output(next((c for c in codes if c), 0), "".join(self.lines))
        result.leftover = processes_left(self.run_id)
        LEFTOVERS.extend(f"cluster {' '.join(self.script[-6:])[:120]}: {p}" for p in result.leftover)
        return result

    def wait_for(self, event: threading.Event, what: str, timeout: float = 300) -> None:
        """Wait for `event` (set by on_line when a line shows up); if it never comes, kill the cluster and
        fail with the end of its output."""
        deadline = time.monotonic() + timeout
        while not event.wait(1.0):
            ended = all(proc.poll() is not None for proc in self.launchers)
            if ended or time.monotonic() > deadline:
                self.kill()
                why = "every launcher ended before it" if ended else f"not within {timeout} s"
                raise AssertionError(f"{what} never logged ({why}):\n" + "".join(self.lines)[-6000:])

    def kill(self) -> None:
        for proc in self.launchers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        processes_left(self.run_id, grace_s=0)
