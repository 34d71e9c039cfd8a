"""Fault injection read by the adaptor itself: env MINDIO_FAULT_INJECT says which rank fails, at which
step and phase, and how. Tests and the demo use it to produce real failures inside real training.

Grammar (whitespace around kinds, keys and values is ignored)::

    spec   := fault (';' fault)*             an unset or blank variable means no faults
    fault  := KIND ':' item (',' item)*
    item   := KEY '=' VALUE
    KIND   := raise | kill | hang | sigterm | slow | flip
    KEY    := rank (required, integer >= 0) | step (required, integer >= 0)
            | phase (forward | backward | optimizer | completed | line | repair | save | written | exit | eval;
                     default forward; flip needs completed)
            | msg   (only for raise; the RuntimeError's text, default "Other ERROR")
            | seconds (only for slow, and required there: 0 < seconds <= 60)

Escaping: a backslash makes the next character literal, so a message can carry the separators:
``\\;`` ``\\,`` ``\\=`` ``\\:`` ``\\\\``. Any other escape, a trailing backslash, an unescaped ``=`` inside a
value, an empty fault or item, a repeated key or two faults at the same (rank, step, phase) are errors.
Colons need no escape after the kind (only the first ``:`` separates it), so NCCL-style texts such as
``msg=ncclRemoteError: remote process exited`` work as written.

Kinds:
- raise   -- RuntimeError(msg) from the calling thread: the path a classified training error takes.
- kill    -- SIGKILL to this process: no handler, no cleanup; seen only as a lost heartbeat.
- hang    -- the CALLING thread sleeps forever (time.sleep in a loop, the GIL released), so other
             threads -- the heartbeat, the native processor's threads -- keep running and the process
             stays alive: the signature of a stuck collective. If the calling thread is the main
             thread, Python signal handlers still run between sleeps.
- sigterm -- SIGTERM to this process, as a job manager's graceful stop. With the default disposition
             the process dies; with a handler installed the handler runs and maybe_fire returns.
- slow    -- the calling thread sleeps `seconds` at this phase of EVERY step from `step` on: sub-healthy
             hardware, not a failure (no marker: it is no once-per-job event, and a restarted process is as
             slow again). Said once in the log.
- flip    -- one bit of this rank's optimizer shard flipped, at rest after the step's update: the highest
             mantissa bit (bit 22) of the middle element of the shard's first float32 tensor (an fp32 main
             param). Silent data corruption: nothing fails, the value is just wrong.

Once per job: before firing, a marker file is created with O_CREAT|O_EXCL in the state directory; if it
exists the fault has already fired in this job (before a recompute, a resume from checkpoint or a process
restart) and is skipped. The marker is written BEFORE firing so a kill cannot leave it unwritten.
State directory: the caller's, else env MINDIO_FAULT_STATE_DIR, else
``<tempdir>/mindio_fault_state-<uid>/<job id>`` (created private to this user, refused when another
user owns it or may write to it: a marker planted there would silence a planned fault) with the job id from TORCHELASTIC_RUN_ID (torchrun; its
placeholder "none" does not count) or SLURM_JOB_ID. With none of these the plan refuses to start: without
a job identity "once per job" cannot hold and a restarted rank would fail again forever.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from mindio_adaptor.core.process.private_files import NotPrivate, private_dir

logger = logging.getLogger("mindio_adaptor.fault_inject")

ENV_SPEC = "MINDIO_FAULT_INJECT"
ENV_STATE_DIR = "MINDIO_FAULT_STATE_DIR"
KINDS = ("raise", "kill", "hang", "sigterm", "slow", "flip")
MAX_SLOW_S = 60.0
# completed: once the step's update is final (after the scheduler's step), the state at rest.
# line: in Megatron's training_log of the step, before its collectives: the step is over on every rank (its losses
# reduced) and its loss line not yet printed.
# repair: when the rank starts its part of a recovery the controller drives (the CLEAN action), `step`
# being the interrupted step -- a second fault while a repair is running.
# save: inside the checkpoint save of iteration `step`, once Megatron created its directory and before
# this rank writes its part (other ranks may have written theirs).
# written: inside the same save, once this rank wrote its files and before the save's closing barrier
# (the others may wait at that barrier, their own files written).
# exit: when the process exits, before the rank leaves the controller (`step` the last iteration).
PHASES = ("forward", "backward", "optimizer", "completed", "line", "repair", "save", "written", "exit", "eval")
DEFAULT_PHASE = "forward"
DEFAULT_MESSAGE = "Other ERROR"
_KEYS = ("rank", "step", "phase", "msg", "seconds")
_ESCAPABLE = "\\;,=:"
# torchrun's default --rdzv-id is the literal "none": shared by unrelated jobs, so not a job identity.
_JOB_ID_ENVS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")


class FaultSpecError(ValueError):
    """MINDIO_FAULT_INJECT (or the state directory it needs) is unusable; the message names the part."""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    step: int
    phase: str = DEFAULT_PHASE
    msg: Optional[str] = None
    seconds: Optional[float] = None  # slow's sleep per step

    @property
    def message(self) -> str:
        return DEFAULT_MESSAGE if self.msg is None else self.msg

    @property
    def marker_name(self) -> str:
        # (rank, step, phase) is unique within a plan; the kind is kept for a human reading the dir.
        return f"{self.kind}-rank{self.rank}-step{self.step}-{self.phase}.fired"

    def to_spec(self) -> str:
        """The fault in MINDIO_FAULT_INJECT syntax (parses back to an equal Fault)."""
        text = f"{self.kind}:rank={self.rank},step={self.step},phase={self.phase}"
        if self.seconds is not None:
            text += f",seconds={self.seconds:g}"
        return text if self.msg is None else f"{text},msg={_escape(self.msg)}"


# ---------------------------------------------------------------- parsing

def _split(text: str, sep: str, where: str) -> List[str]:
    """Split on `sep` where it is not escaped; the pieces keep their escapes for _unescape."""
    pieces, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 == len(text):
                raise FaultSpecError(f"{where}: trailing backslash (escape a literal one as \\\\)")
            current.append(text[i:i + 2])
            i += 2
            continue
        if ch == sep:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    pieces.append("".join(current))
    return pieces


def _unescape(text: str, where: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            nxt = text[i + 1]  # _split already rejected a trailing backslash
            if nxt not in _ESCAPABLE:
                raise FaultSpecError(f"{where}: unknown escape '\\{nxt}' (only \\\\ \\; \\, \\= \\: exist)")
            out.append(nxt)
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _escape(text: str) -> str:
    return "".join("\\" + ch if ch in _ESCAPABLE else ch for ch in text)


def _parse_int(value: str, key: str, where: str) -> int:
    if not value.isdigit() or not value.isascii():
        raise FaultSpecError(f"{where}: {key}={value!r} is not a non-negative integer")
    return int(value)


def _parse_items(body: str, where: str) -> Dict[str, str]:
    items: Dict[str, str] = {}
    for raw in _split(body, ",", where):
        if not raw.strip():
            raise FaultSpecError(f"{where}: empty key=value item (stray ',' ?)")
        parts = _split(raw, "=", where)
        if len(parts) == 1:
            raise FaultSpecError(f"{where}: {raw.strip()!r} is not key=value")
        if len(parts) > 2:
            raise FaultSpecError(f"{where}: {raw.strip()!r} has more than one '=' (write \\= inside a value)")
        key = parts[0].strip()
        if key not in _KEYS:
            raise FaultSpecError(f"{where}: unknown key {key!r}; known: {', '.join(_KEYS)}")
        if key in items:
            raise FaultSpecError(f"{where}: key {key!r} given twice")
        items[key] = _unescape(parts[1].strip(), where)
    return items


def _parse_fault(text: str, where: str) -> Fault:
    head = _split(text, ":", where)
    if len(head) == 1:
        raise FaultSpecError(f"{where}: missing ':' after the kind (expected KIND:rank=R,step=S)")
    kind, body = head[0].strip(), ":".join(head[1:])
    if kind not in KINDS:
        raise FaultSpecError(f"{where}: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    items = _parse_items(body, where)
    for key in ("rank", "step"):
        if key not in items:
            raise FaultSpecError(f"{where}: missing {key}=")
    phase = items.get("phase", DEFAULT_PHASE)
    if phase not in PHASES:
        raise FaultSpecError(f"{where}: unknown phase {phase!r}; known: {', '.join(PHASES)}")
    msg = items.get("msg")
    if msg is not None and kind != "raise":
        raise FaultSpecError(f"{where}: msg= is only for raise, not {kind}")
    if msg is not None and not msg:
        raise FaultSpecError(f"{where}: msg= is empty (leave it out for {DEFAULT_MESSAGE!r})")
    if kind == "flip" and phase != "completed":
        raise FaultSpecError(f"{where}: flip changes the state at rest: give phase=completed")
    return Fault(kind, _parse_int(items["rank"], "rank", where), _parse_int(items["step"], "step", where),
                 phase, msg, _parse_seconds(kind, items.get("seconds"), where))


def _parse_seconds(kind: str, value: Optional[str], where: str) -> Optional[float]:
    if (value is None) != (kind != "slow"):
        raise FaultSpecError(f"{where}: seconds= is " + ("required for slow" if kind == "slow" else
                                                           f"only for slow, not {kind}"))
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise FaultSpecError(f"{where}: seconds={value!r} is not a number") from None
    if not 0 < seconds <= MAX_SLOW_S:
        raise FaultSpecError(f"{where}: seconds={value} must be within (0, {MAX_SLOW_S:g}]")
    return seconds


def parse_spec(spec: Optional[str]) -> Tuple[Fault, ...]:
    """All faults of a MINDIO_FAULT_INJECT value, in order; FaultSpecError names the bad part."""
    if spec is None or not spec.strip():
        return ()
    faults, seen = [], {}
    for index, raw in enumerate(_split(spec, ";", ENV_SPEC), start=1):
        where = f"{ENV_SPEC} fault {index} {raw.strip()!r}"
        if not raw.strip():
            raise FaultSpecError(f"{ENV_SPEC} fault {index}: empty (stray ';' ?)")
        fault = _parse_fault(raw, where)
        point = (fault.rank, fault.step, fault.phase)
        if point in seen:
            raise FaultSpecError(f"{where}: rank {fault.rank} step {fault.step} {fault.phase} already has "
                                 f"fault {seen[point]}")
        seen[point] = index
        faults.append(fault)
    return tuple(faults)


# ---------------------------------------------------------------- state directory

def resolve_state_dir(environ: Mapping[str, str], state_dir: Optional[str] = None) -> str:
    """Where the once-per-job markers live (see the module docstring for the order)."""
    if state_dir:
        return state_dir
    if environ.get(ENV_STATE_DIR):
        return environ[ENV_STATE_DIR]
    for name in _JOB_ID_ENVS:
        job_id = environ.get(name, "").strip()
        if job_id and job_id != "none":
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in job_id)
            return _private_dir(os.path.join(tempfile.gettempdir(), f"mindio_fault_state-{os.getuid()}",
                                             f"{name.lower()}-{safe}"))
    raise FaultSpecError(f"{ENV_SPEC} is set but no state directory for its once-per-job markers: set "
                         f"{ENV_STATE_DIR} (or run under torchrun with --rdzv-id, or under Slurm)")


def _private_dir(path: str) -> str:
    """`path` made private (core/process/private_files), or FaultSpecError naming the fix: a marker planted in a
    directory others may write to would silence a planned fault."""
    try:
        return private_dir(path)
    except NotPrivate as err:
        raise FaultSpecError(f"fault state directory {err}: remove it, or set {ENV_STATE_DIR} to a private "
                             f"directory") from None


# ---------------------------------------------------------------- firing

def _hang(fault: Fault) -> None:
    while True:  # never returns; sleeping releases the GIL so other threads keep running
        time.sleep(3600)


def _kill(fault: Fault) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    _hang(fault)  # unreachable: SIGKILL cannot be caught; never fall back into training


def _sigterm(fault: Fault) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def _raise(fault: Fault) -> None:
    raise RuntimeError(fault.message)


FLIPPED_BIT = 22  # float32's highest mantissa bit: the value changes by up to half, silently


def flip_bit(shard: Sequence[torch.Tensor]) -> str:
    """Flip FLIPPED_BIT of the middle element of the shard's first float32 tensor; says what it did."""
    for index, tensor in enumerate(shard):
        if tensor.dtype == torch.float32 and tensor.numel():
            element = tensor.numel() // 2
            words = tensor.detach().view(-1).view(torch.int32)
            before = float(tensor.detach().view(-1)[element])
            words[element] ^= 1 << FLIPPED_BIT
            return (f"bit {FLIPPED_BIT} of element {element} of shard tensor {index}: {before!r} -> "
                    f"{float(tensor.detach().view(-1)[element])!r}")
    raise FaultSpecError("flip: this rank's optimizer shard has no float32 tensor")


_FIRE = {"raise": _raise, "kill": _kill, "hang": _hang, "sigterm": _sigterm}


class FaultPlan:
    """The faults of one job and the directory that remembers which already fired."""

    def __init__(self, faults: Tuple[Fault, ...] = (), state_dir: Optional[str] = None):
        self.faults = tuple(faults)
        self.state_dir = state_dir
        self._by_point = {(f.rank, f.step, f.phase): f for f in self.faults if f.kind != "slow"}
        self._slow = [f for f in self.faults if f.kind == "slow"]
        self._slow_said = set()
        if self.faults:
            if not state_dir:
                raise FaultSpecError("FaultPlan with faults needs a state_dir for its once-per-job markers")
            try:
                os.makedirs(state_dir, mode=0o700, exist_ok=True)
            except OSError as exc:  # at start, not at the step where the fault should fire
                raise FaultSpecError(f"fault state directory {state_dir!r} is unusable: {exc}") from exc

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, state_dir: Optional[str] = None) -> "FaultPlan":
        """Read MINDIO_FAULT_INJECT; raises FaultSpecError at start for a malformed spec."""
        environ = os.environ if environ is None else environ
        faults = parse_spec(environ.get(ENV_SPEC))
        if not faults:
            return cls()
        return cls(faults, resolve_state_dir(environ, state_dir))

    def __bool__(self) -> bool:
        return bool(self.faults)

    def check_world_size(self, world_size: int) -> None:
        """Reject faults aimed at ranks that do not exist (they would silently never fire)."""
        for fault in self.faults:
            if fault.rank >= world_size:
                raise FaultSpecError(f"{ENV_SPEC} fault {fault.to_spec()!r}: rank {fault.rank} does not "
                                     f"exist (world size {world_size})")

    def maybe_fire(self, rank: int, step: int, phase: str = DEFAULT_PHASE,
                   shard: Optional[Callable[[], Sequence[torch.Tensor]]] = None) -> None:
        """Fire the fault planned for (rank, step, phase) unless it already fired in this job.
        Cheap when nothing is planned there: one dict lookup. `shard` gives a flip its tensors."""
        if phase not in PHASES:
            raise ValueError(f"maybe_fire: unknown phase {phase!r}; known: {', '.join(PHASES)}")
        for slow in self._slow:
            if (slow.rank, slow.phase) == (rank, phase) and step >= slow.step:
                self._sleep(slow)
        fault = self._by_point.get((rank, step, phase))
        if fault is None or not self._claim(fault):
            return
        logger.warning("fault injection: firing %s on rank %d at step %d (%s) at %s [pid %d]", fault.kind,
                       rank, step, phase, time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getpid())
        if fault.kind == "flip":
            if shard is None:
                raise FaultSpecError(f"{fault.to_spec()}: fired where no optimizer shard is at hand")
            logger.warning("fault injection: flipped %s", flip_bit(shard()))
            return
        _FIRE[fault.kind](fault)

    def _sleep(self, fault: Fault) -> None:
        if fault not in self._slow_said:
            self._slow_said.add(fault)
            logger.warning("fault injection: rank %d is slow from step %d on: %g s more at each %s [pid %d]",
                           fault.rank, fault.step, fault.seconds, fault.phase, os.getpid())
        time.sleep(fault.seconds)

    def marker_path(self, fault: Fault) -> str:
        return os.path.join(self.state_dir, fault.marker_name)

    def _claim(self, fault: Fault) -> bool:
        """Create the fault's marker atomically; False when another process (or an earlier life of
        this one) already did. Flushed to disk before the fault fires."""
        path = self.marker_path(fault)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            logger.info("fault injection: %s already fired in this job (%s); skipped", fault.to_spec(), path)
            return False
        record = {"fault": fault.to_spec(), "pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
