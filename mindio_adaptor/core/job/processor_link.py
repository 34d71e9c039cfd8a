"""The typed link between a training process and the recovery controller, over the native processor.

What the controller asks of a rank (a ControllerAction, with its repair and save assignments) and
what it decided (a ControllerDecision) arrive here as dataclasses. patches/ works with these
directly; the reference face (mindio_adaptor/ttp/processor.py) only translates its tft_* calls and
its registered handlers onto this link. A process has one link at a time (open_link / current /
close_link).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Collection, Dict, List, Optional, Sequence, Tuple

from mindio_adaptor import _native
from mindio_adaptor.core.detection.enums import Action, RepairType, ReportState
from mindio_adaptor.core.process import fork_safety

# Actions a rank needs no handler for: the native processor records them itself.
RECORDED_ONLY = ("normal", "exit", "pause", "continue", "prelock")

# How long one native wait for the decision lasts before it looks again (a KeyboardInterrupt, a caller's
# deadline, a parked rank's end of waiting).
DECISION_SLICE_S = 0.5


class ControllerUnreachable(RuntimeError):
    """The controller closed the link, or the processor gave up reconnecting (TTP_RETRY_TIMES)."""


class CutOffFromTheJob(ControllerUnreachable):
    """The rank lost the leader without proof that its process is gone, and the ranks that reached a backup
    are a minority: it must leave the job (core/detection/cut_off). `reason`: the processor's words for it."""

    def __init__(self, rank: int, reason: str):
        super().__init__(f"rank {rank}: cut off from the job: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class RepairAssignment:
    """Who sends an optimizer shard to whom in a REPAIR, for one repair type: pair i goes from src[i]
    to dst[i] and is a shard of optimizer type optimizer_types[i]. rank_list: every rank of the repair."""
    repair_type: RepairType
    src: Tuple[int, ...] = ()
    dst: Tuple[int, ...] = ()
    optimizer_types: Tuple[int, ...] = ()
    rank_list: Tuple[int, ...] = ()

    @classmethod
    def from_wire(cls, entry: dict) -> "RepairAssignment":
        """The controller's plan has one entry per optimizer type, every pair of that type."""
        src, dst = tuple(int(r) for r in entry["src"]), tuple(int(r) for r in entry["dst"])
        return cls(RepairType(int(entry["repair_type"])), src, dst, (int(entry["optimizer_type"]),) * len(src),
                   tuple(int(r) for r in entry["rank_list"]))

    def pairs(self) -> List[Tuple[int, int]]:
        return list(zip(self.src, self.dst))


@dataclass(frozen=True)
class SaveAssignment:
    """The ranks that save the shards of one optimizer type in a dump."""
    optimizer_type: int
    ranks: Tuple[int, ...]


@dataclass(frozen=True)
class ControllerAction:
    name: str  # stop, clean, rebuild_group, repair, rollback, save_ckpt, rename, exit, normal, pause, ...
    strategy: str = "none"  # the controller's decision in force: none, retry, recover, dump, exit
    step: int = -1  # the repair step (the step a dump saves, a reload loads)
    need_rebuild: bool = False
    is_uce: bool = False
    error_ranks: Tuple[int, ...] = ()
    repairs: Tuple[RepairAssignment, ...] = ()  # as planned: one per optimizer type, every rank's pairs
    saves: Tuple[SaveAssignment, ...] = ()
    absent_ranks: Tuple[int, ...] = ()  # rebuild_group of a partial scale-out: retired ranks that stay out

    @classmethod
    def from_wire(cls, wire: dict, strategy: str = "none") -> "ControllerAction":
        return cls(name=wire["name"], strategy=strategy, step=int(wire.get("step", -1)),
                   need_rebuild=bool(wire.get("need_rebuild", False)), is_uce=bool(wire.get("is_uce", False)),
                   error_ranks=tuple(int(r) for r in wire.get("error_ranks", ())),
                   repairs=tuple(RepairAssignment.from_wire(e) for e in wire.get("repair", ())),
                   saves=tuple(SaveAssignment(int(s["optimizer_type"]), tuple(int(r) for r in s["ranks"]))
                               for s in wire.get("save", ())),
                   absent_ranks=tuple(int(r) for r in wire.get("absent_ranks", ())))

    def own_repairs(self, rank: Optional[int]) -> List[RepairAssignment]:
        """What `rank` does in this REPAIR: one assignment per repair type of the plan, holding only the
        pairs `rank` sends or receives (none for a rank that only rolls back or reloads)."""
        merged: Dict[RepairType, dict] = {}
        for entry in self.repairs:
            own = merged.setdefault(entry.repair_type, {"src": [], "dst": [], "types": [], "ranks": set()})
            for (src, dst), optimizer_type in zip(entry.pairs(), entry.optimizer_types):
                if rank in (src, dst):
                    own["src"].append(src)
                    own["dst"].append(dst)
                    own["types"].append(optimizer_type)
            own["ranks"].update(entry.rank_list)
        return [RepairAssignment(repair_type, tuple(own["src"]), tuple(own["dst"]), tuple(own["types"]),
                                 tuple(sorted(own["ranks"]))) for repair_type, own in merged.items()]


@dataclass(frozen=True)
class ControllerDecision:
    go_on: bool  # training goes on after repair_step (the reference's RETRY); otherwise the job ends (EXIT)
    strategy: str  # retry, recover, dump, exit, or none
    repair_step: int
    ranks: Tuple[int, ...] = ()  # an EXIT's error ranks: in a hot switch, every rank it hands over


class _DecisionWatcher:
    """The native wait for a parked rank's decision, on a thread of its own: `code` once the wait ended (a
    decision, the link's end, or -1 at the deadline), then wake()."""

    def __init__(self, link: "ProcessorLink", deadline: Optional[float], wake: Optional[Callable[[], None]]):
        self.code: Optional[int] = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(link, deadline, wake),
                                        name=f"mindio-decision-{link.rank}", daemon=True)
        self._thread.start()

    def _watch(self, link, deadline, wake) -> None:
        self.code = link._native_wait_until(deadline, self._stopped.is_set)
        if wake is not None and not self._stopped.is_set():
            wake()

    def stop(self) -> None:
        """The waiting thread gave up (it leaves the job): the watcher ends within one slice."""
        self._stopped.set()


ActionHandler = Callable[[ControllerAction], Tuple[int, str]]  # -> (result code, message)
# The result code of a REBUILD_GROUP reply that is no failure: the rank leaves the job, which goes on without
# it (a scale-in dropped its data-parallel slice, core/detection/leaving_rank); the controller retires it.
LEAVES_THE_JOB = _native.LEAVES_THE_JOB
# A restarted process's registration refused because the controller is ending the job (its dump, its exit): a
# ValueError, as every refusal.
JobEnding = _native.JobEnding


class ProcessorLink:
    """One rank's processor: registration, progress reports, faults, the controller's actions (run by
    the handler given to on_action, on the processor's worker thread) and its decision."""

    def __init__(self, rank: int, world_size: int, allow_replacement: bool = False):
        self.rank, self.world_size = rank, world_size
        fork_safety.guard_forks()  # the processor's threads enter Python
        self.native = _native.Processor(rank, world_size)
        if self.native.restarted() and not allow_replacement:
            raise ValueError(f"rank {rank}: MINDIO_RESTARTED=1 marks a restarted process, which only process "
                             f"replacement can take in: pass enable_arf=True to tft_init_processor")
        self.native.allow_replacement(bool(allow_replacement))
        self._handler: Optional[ActionHandler] = None
        self._domain = ""  # the failure domain the layout was reported with
        self.answers: Collection[str] = ()  # the actions the handler acts on (the rest it only acknowledges)
        # What a thread waiting for the decision runs between short waits when its caller passes nothing
        # (the reference's tft_wait_next_action): a framework's stages posted to its parked training thread.
        self.between_waits: Optional[Callable[[], None]] = None
        self.wake_waits: Optional[Callable[[], None]] = None  # what ends a wait of between_waits
        self.native.set_dispatcher(self._dispatch)

    def start(self, host: str, port: int, backups: Sequence[Tuple[str, int]] = ()) -> None:
        """Connect and register (retrying per TTP_RETRY_TIMES); raises ValueError with the reason (JobEnding when
        the controller refused a restarted process because it is ending the job). `backups`: the controllers
        that take over from this one, in order; when the one this rank registered with cannot be reached, the
        next of the list is tried."""
        self.native.start_with([(host, int(port)), *((h, int(p)) for h, p in backups)])

    def controller_address(self) -> str:
        """host:port of the controller this rank registers with now."""
        return self.native.controller_address()

    def replace_controller(self, index: int, host: str, port: int) -> None:
        """The list's controller `index` moved to host:port (its node was replaced and hosts one again)."""
        self.native.replace_controller(int(index), host, int(port))

    def report_layout(self, rank: int, replica_info: List[dict], domain: Optional[str] = None) -> None:
        """The replica layout in the reference's form: one dict per optimizer type, {"rank_list",
        "replica_cnt", "replica_shift"}; the list position is the optimizer type unless a dict names
        "optimizer_type". `domain`: this rank's failure domain (its node), so that the controller can
        say which holders of a shard share one; None: the one reported last (a layout reported again
        after a resize)."""
        domain = self._domain if domain is None else domain
        self._domain = domain
        groups = []
        for position, info in enumerate(replica_info):
            missing = {"rank_list", "replica_cnt"} - set(info)
            if missing:
                raise ValueError(f"tft_set_optimizer_replica: entry {position} lacks {sorted(missing)}")
            groups.append({"optimizer_type": int(info.get("optimizer_type", position)),
                           "replica_cnt": int(info["replica_cnt"]), "replica_shift": int(info.get("replica_shift", 0)),
                           "rank_list": [int(r) for r in info["rank_list"]]})
        self.native.set_replica(rank, groups, domain)

    def update_started(self, backup_step: int) -> None:
        """An optimizer update starts; `backup_step` is the last step whose state is complete meanwhile."""
        self.native.start_updating(int(backup_step))

    def update_ended(self, step: int) -> None:
        self.native.end_updating(int(step))

    def report_state_of_step(self, step: int) -> None:
        """This rank holds the state of `step` now (a rollback's: its own, a replica peer's or a checkpoint's),
        whatever its last update was: the controller counts `step` as its last completed one from now on."""
        self.native.report_loaded_step(int(step))

    def report_saved_step(self, step: int) -> None:
        """Every part of this rank's periodic checkpoint of `step` is written: it can be loaded again."""
        self.native.report_ckpt_step(int(step))

    def finish(self) -> None:
        """Training is over on this rank: the controller acts on no later fault."""
        self.native.finish()

    def counters(self) -> dict:
        """What this processor sent the controller so far, heartbeats too (of them, the step sections' changes its
        network thread sent after their wait), and the locks it took."""
        stats = self.native.stats()
        return {"frames to the controller": stats["frames_sent"], "bytes to the controller": stats["bytes_sent"],
                "of them deferred": stats["frames_deferred"], "processor locks": stats["locks_taken"]}

    def sections(self):
        """What patches/sections reports through (begin_section, end_section, add_progress): the timed
        sections the controller's hang rule judges."""
        return self.native

    def on_action(self, handler: Optional[ActionHandler], answers: Collection[str] = ()) -> None:
        """`handler` runs every action from now on; `answers` names those it acts on (a live view may
        grow as handlers are registered), for a client that checks its actions are covered."""
        self._handler, self.answers = handler, answers

    def _dispatch(self, wire: dict) -> Tuple[int, str]:
        action = ControllerAction.from_wire(wire, self.strategy())
        if self._handler is not None:
            return self._handler(action)
        if action.name in RECORDED_ONLY:
            return 0, ""
        return 1, f"rank {self.rank} action {action.name}: nothing on this rank handles the controller's actions"

    def strategy(self) -> str:
        """The controller's decision in force (none before any): retry, recover, dump, exit."""
        return self.native.repair_type()

    def repair_step(self) -> int:
        return self.native.repair_step()

    def report_fault(self, state: ReportState, error_code: str = "") -> None:
        self.native.report_error(int(ReportState(state)), error_code)

    def report_sub_health(self, code: str) -> None:
        """This rank's hardware is suspect (`code` says why); the controller flags it, training goes on."""
        self.native.report_error(int(ReportState.SUB_HEALTH), code)

    def await_decision(self, timeout_s: Optional[float] = None, between: Optional[Callable[[], None]] = None,
                       wake: Optional[Callable[[], None]] = None) -> ControllerDecision:
        """Wait for the controller's decision after a reported fault: the only such wait, shared by the
        reference's tft_wait_next_action and tft_exception_handler and by a parked Megatron rank.
        A parked rank passes `between`, which runs its recovery stages and blocks in its own short wait for
        more (it may raise to give up), and `wake`, which ends that wait: the decision is then awaited on a
        thread of its own, which calls wake() when it comes, so the parked thread has one wait, not two
        that cannot wake each other. Without them, `between_waits` and `wake_waits` are used; without
        those, the native wait runs here, in short slices so that KeyboardInterrupt is seen.
        A lost controller raises ControllerUnreachable; no decision within `timeout_s` (None: no limit)
        raises TimeoutError."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        between = between if between is not None else self.between_waits
        wake = wake if wake is not None else self.wake_waits
        if between is None:
            return self._decision_for(self._native_wait_until(deadline, lambda: False), timeout_s)
        watcher = _DecisionWatcher(self, deadline, wake)
        try:
            while watcher.code is None:
                between()
            return self._decision_for(watcher.code, timeout_s)
        finally:
            watcher.stop()

    def _native_wait_until(self, deadline: Optional[float], given_up: Callable[[], bool]) -> int:
        """The native wait's code once it is a decision or the link's end, or -1 at the deadline or once
        `given_up()`."""
        while not given_up():
            slice_s = DECISION_SLICE_S if deadline is None else max(0.0, min(DECISION_SLICE_S,
                                                                             deadline - time.monotonic()))
            code = self.native.wait_next_action(slice_s)
            if code in (Action.RETRY, Action.EXIT, -2):
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return -1
        return -1

    def _decision_for(self, code: int, timeout_s: Optional[float]) -> ControllerDecision:
        if code in (Action.RETRY, Action.EXIT):
            ranks = () if code == Action.RETRY else tuple(self.native.exit_ranks())
            return ControllerDecision(code == Action.RETRY, self.strategy(), self.repair_step(), ranks)
        if code == -2:
            cut_off = self.cut_off()
            if cut_off:
                raise CutOffFromTheJob(self.rank, cut_off)
            raise ControllerUnreachable(self._why_unreachable())
        raise TimeoutError(f"rank {self.rank}: no decision from the controller within {timeout_s:.0f} s")

    def _why_unreachable(self) -> str:
        closed = self.native.controller_closed()
        if closed:
            return f"rank {self.rank}: the controller closed ({closed})"
        return f"rank {self.rank}: the controller is unreachable (gave up after TTP_RETRY_TIMES)"

    def cut_off(self) -> str:
        """Why this rank is cut off from the job (a minority that reaches no leader), or ''."""
        return self.native.cut_off()

    def controller_term(self) -> int:
        """The term of the controller this rank registered with last (0: none yet). A controller that
        takes over has a higher term; one of an older term is refused."""
        return self.native.controller_term()

    def connected(self) -> bool:
        """Whether the link is up now (False while the processor reconnects)."""
        return self.native.connected()


_lock = threading.Lock()
_link: Optional[ProcessorLink] = None


def open_link(rank: int, world_size: int, allow_replacement: bool = False) -> ProcessorLink:
    global _link
    with _lock:
        if _link is not None:
            raise RuntimeError("a processor already exists in this process; call tft_destroy_processor() first")
        _link = ProcessorLink(rank, world_size, allow_replacement)
        return _link


def current() -> ProcessorLink:
    link = _link
    if link is None:
        raise RuntimeError("no processor: call tft_init_processor() and tft_start_processor() first")
    return link


def current_or_none() -> Optional[ProcessorLink]:
    return _link


def close_link() -> None:
    """Leave: the controller is told this rank goes on purpose, then the connection is closed."""
    global _link
    with _lock:
        link, _link = _link, None
    if link is not None:
        link.native.stop()
