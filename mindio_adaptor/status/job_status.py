"""What an operator wants to know about a running job, from what the controller keeps: its state and
term, each rank's health, last step and node, the replica layout (which holders of a shard share a
node), the faults it saw, what it decided, each recovery with its duration, and the job's scaling
history and data-parallel size (elastic training, status/scaling).

A pure function of the controller's views (state, rank table, layout, event log, counters), so the
status page, the metrics and the terminal table all say the same thing, and a test can feed it a
recorded event log.
"""
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from mindio_adaptor.status.scaling import ScaleEvent, dp_size_of, retired_ranks, scale_events, scale_out_note

Event = Tuple[float, str, str]  # (seconds since the controller started, kind, detail)

HEALTH_ORDER = ("healthy", "suspect", "disconnected", "joining", "retired", "dead", "left", "finished", "unregistered")
_GONE = ("retired", "dead", "left", "unregistered")  # holders whose copy is out of reach
_FAULT_DETAIL = re.compile(r"^rank (\d+) (\w+):")


@dataclass
class RankStatus:
    rank: int
    health: str  # one of HEALTH_ORDER; "retired": a scale-in dropped it (status/scaling.retired_ranks)
    step: int  # the last step it reported complete (-1: none yet)
    flags: List[str]
    heartbeat_lag_s: Optional[float] = None  # since the controller last heard from it; None: not connected
    heartbeat_period_s: Optional[float] = None  # the period it beats at
    domain: str = ""  # its failure domain (node), as it reported it; "": not said


@dataclass
class ShardStatus:
    """One optimizer shard and the ranks that hold a copy of it (the controller's replica layout)."""
    optimizer_type: int
    group: int  # which rank list of that optimizer type
    shard: int
    holders: List[int]
    live_holders: List[int]  # holders neither dead nor gone
    shared_domains: List[str]  # nodes that hold more than one copy: losing one loses those copies

    def notes(self) -> List[str]:
        """What needs a look: a node holding several copies, copies lost; empty when spread and whole."""
        lost = len(self.live_holders) < len(self.holders)
        return ([f"node {d} holds several copies" for d in self.shared_domains] +
                ([f"{len(self.live_holders)} of {len(self.holders)} copies alive"] if lost else []))


@dataclass
class Recovery:
    number: int
    started_s: float  # controller time of the fault that began it
    strategy: str = "undecided"
    ended_s: Optional[float] = None
    outcome: str = "in progress"  # "training goes on", "job ended", "in progress"
    faults: List[str] = field(default_factory=list)  # "rank 3 uce"
    resized: str = ""  # a scale-in or scale-out within it: "dp8 -> dp6"

    @property
    def duration_s(self) -> Optional[float]:
        return None if self.ended_s is None else self.ended_s - self.started_s


@dataclass
class JobStatus:
    state: str
    ranks: List[RankStatus]
    faults_by_kind: Dict[str, int]
    decisions_by_strategy: Dict[str, int]
    recoveries: List[Recovery]
    counters: Dict[str, int]
    last_event_s: float  # controller time (s since it started) of its latest event
    term: int = 1  # the controller's term: 1 for the first, one more for each takeover
    shards: List[ShardStatus] = field(default_factory=list)
    dp_size: Optional[int] = None  # the data-parallel size of the layout now; None: not reported
    scaling: List[ScaleEvent] = field(default_factory=list)
    scale_out_note: str = ""  # the controller's latest word on a scale-out not yet made
    goodput: Optional[dict] = None  # the controller's ledger: {"wall_s", "uses", "recoveries"} (status/goodput)

    def health_counts(self) -> Dict[str, int]:
        counts = {health: 0 for health in HEALTH_ORDER}
        for rank in self.ranks:
            counts[rank.health] += 1
        return counts

    def to_json(self) -> dict:
        out = asdict(self)
        out["health"] = self.health_counts()
        for shard, raw in zip(self.shards, out["shards"]):
            raw["notes"] = shard.notes()
        for recovery, raw in zip(self.recoveries, out["recoveries"]):
            raw["duration_s"] = recovery.duration_s
        for event, raw in zip(self.scaling, out["scaling"]):
            raw["sizes"] = event.sizes
        return out


def job_status(state: str, ranks: Sequence[dict], events: Sequence[Event], counters: Dict[str, int],
               layout: Sequence[dict] = (), term: int = 1, goodput: Optional[dict] = None) -> JobStatus:
    """ranks: the controller's rank table as controller_ranks() gives it ({"step", "flags", "silent_ms",
    "heartbeat_ms", "domain"} per rank); layout: its replica sets as controller_layout() gives them
    ({"optimizer_type", "group", "replica_cnt", "ranks"} each)."""
    retired = retired_ranks(events)
    rank_statuses = [_rank_status(r, entry, r in retired) for r, entry in enumerate(ranks)]
    scaling = scale_events(events, len(ranks), layout)
    return JobStatus(state=state, ranks=rank_statuses,
                     faults_by_kind=_count(kind for _, kind in _faults(events)),
                     decisions_by_strategy=_count(d.split(":")[0] for _, k, d in events if k == "decision"),
                     recoveries=_with_resizes(recoveries(events), scaling), counters=dict(counters),
                     last_event_s=events[-1][0] if events else 0.0, term=term,
                     shards=[shard for replica_set in layout for shard in _shards(replica_set, rank_statuses)],
                     dp_size=dp_size_of(layout), scaling=scaling, scale_out_note=scale_out_note(events),
                     goodput=goodput)


def _shards(replica_set: dict, ranks: Sequence[RankStatus]) -> List[ShardStatus]:
    """The holders of each shard of one rank list: with g = len(list) / replica_cnt shards, shard j is
    held by list[j], list[j + g], ... (core/layout/replica_layout.py, csrc/controller/replica_manager.h)."""
    members, copies = list(replica_set["ranks"]), int(replica_set["replica_cnt"])
    count = len(members) // copies if copies > 0 else 0
    by_rank = {r.rank: r for r in ranks}
    out = []
    for shard in range(count):
        holders = members[shard::count]
        live = [h for h in holders if h in by_rank and by_rank[h].health not in _GONE]
        domains = [by_rank[h].domain for h in holders if h in by_rank and by_rank[h].domain]
        shared = sorted({d for d in domains if domains.count(d) > 1})
        out.append(ShardStatus(int(replica_set["optimizer_type"]), int(replica_set.get("group", 0)), shard, holders,
                               live, shared))
    return out


def _rank_status(rank: int, entry: dict, retired: bool = False) -> RankStatus:
    silent_ms, period_ms = entry.get("silent_ms", -1), entry.get("heartbeat_ms", 0)
    health = _health(entry["flags"])
    if retired and health in ("dead", "left"):  # dropped on purpose by a scale-in: no fault to look at
        health = "retired"
    return RankStatus(rank, health, entry["step"], list(entry["flags"]),
                      silent_ms / 1000.0 if silent_ms >= 0 else None, period_ms / 1000.0 if period_ms else None,
                      entry.get("domain", ""))


def _health(flags: Sequence[str]) -> str:
    for flag in ("dead", "left", "finished", "joining"):
        if flag in flags:
            return flag
    if "registered" not in flags:
        return "unregistered"
    if "connected" not in flags:
        return "disconnected"
    return "suspect" if "suspect" in flags else "healthy"


def _faults(events: Sequence[Event]):
    for _, kind, detail in events:
        match = _FAULT_DETAIL.match(detail) if kind == "fault" else None
        if match:
            yield int(match.group(1)), match.group(2)


def _count(items) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def recoveries(events: Sequence[Event]) -> List[Recovery]:
    """One per departure from NORMAL: from the first fault (or the state change, when no fault came
    first) to the return to NORMAL (training goes on) or to EXIT/FINAL (the job ended), with the
    controller's decision and the faults within. A decision that ended in a scale-in is "recover ->
    scale_in"; a scale-out (no fault: the retired ranks returned) is "scale_out", a hot switch "hot_switch"."""
    out: List[Recovery] = []
    current: Optional[Recovery] = None
    state = "INIT"
    for t, kind, detail in events:
        if kind == "state":
            before, _, state = detail.partition("->")
            if current is None and before == "NORMAL" and state not in ("NORMAL", "FINAL"):
                current = _begin(out, t)
            elif current is not None and state in ("NORMAL", "EXIT", "FINAL"):
                current.ended_s = t
                current.outcome = "training goes on" if state == "NORMAL" else "job ended"
                current = None
        elif kind == "fault" and _FAULT_DETAIL.match(detail):
            if current is None and state == "NORMAL":
                current = _begin(out, t)
            if current is not None:
                rank, fault_kind = _FAULT_DETAIL.match(detail).groups()
                current.faults.append(f"rank {rank} {fault_kind}")
        elif current is not None and kind == "decision" and current.strategy == "undecided":
            current.strategy = detail.split(":")[0]
        elif current is not None and kind == "scale_in":
            current.strategy += " -> scale_in"  # the decision, and what it became (docs/status.md)
        elif current is not None and kind == "scale_out" and current.strategy == "undecided":
            current.strategy = "scale_out"  # not a fault's: the retired ranks returned
        elif current is not None and kind == "hot_switch" and current.strategy == "undecided":
            current.strategy = "hot_switch"  # not a fault's: live ranks handed over
    return out


def _with_resizes(recoveries_: List[Recovery], scaling: Sequence[ScaleEvent]) -> List[Recovery]:
    """Each recovery names the resize made within it (a scale-in, a scale-out)."""
    for recovery in recoveries_:
        ended = float("inf") if recovery.ended_s is None else recovery.ended_s
        for event in scaling:
            if recovery.started_s <= event.at_s <= ended:
                recovery.resized = event.sizes
    return recoveries_


def _begin(recoveries_so_far: List[Recovery], t: float) -> Recovery:
    recovery = Recovery(len(recoveries_so_far) + 1, t)
    recoveries_so_far.append(recovery)
    return recovery
