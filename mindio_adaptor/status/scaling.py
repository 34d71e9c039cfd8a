"""The job's scaling history (elastic training, docs/elastic.md): each scale-in and scale-out with when,
after which step, from which data-parallel size to which, which ranks and why, read from the controller's
event log; and the data-parallel size now, from the replica layout the ranks reported.

The sizes come from layouts, never from a guess. A layout's data-parallel size is the length of one of its
type-0 rank lists (with tensor parallelism there is one list per TP position, all of one length). The
layouts are: the start's (the controller's layout while the job never scaled; otherwise the ranks in the
job divided by the number of type-0 lists of any layout it has, since every rank is in one such list at the
start and a resize keeps how many there are), the one the ranks report after each resize (events
`relayout`, or the part reported before a `relayout_incomplete`), and after a whole scale-out the start's. A
partial scale-out (its event says `partial, without ranks [..]`) leaves the job scaled in: its size is its
relayout's. A size none of these gives is None, shown as "dp?".
"""
import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Set, Tuple

_RANKS_AT_STEP = re.compile(r"^ranks \[([\d,]*)\] at step (-?\d+)(?:: (.*))?$", re.S)
_RANK = re.compile(r"^rank (\d+)")
_RANK_LIST = re.compile(r"^ranks \[([\d,]*)\]")
_LAYOUT_SET = re.compile(r"type (\d+) R=\d+ \[([\d,]*)\]")
_INCOMPLETE_LAYOUT = "the layout is now "


@dataclass
class ScaleEvent:
    number: int
    at_s: float  # controller time of its scale_in / scale_out event
    direction: str  # "in" or "out"
    after_step: int  # the step it started from: training goes on after it
    dp_before: Optional[int]  # None: not known (module docstring)
    dp_after: Optional[int]
    why: str
    lost: List[int] = field(default_factory=list)  # in: lost and not replaced
    left_with_slice: List[int] = field(default_factory=list)  # in: alive, left with their data-parallel slice
    returned: List[int] = field(default_factory=list)  # out: back after the scale-in
    outcome: str = "in progress"  # "training goes on", "job ended", "in progress"

    @property
    def sizes(self) -> str:
        return f"{dp_text(self.dp_before)} -> {dp_text(self.dp_after)}"


def dp_text(size: Optional[int]) -> str:
    return "dp?" if size is None else f"dp{size}"


def dp_size_of(layout: Sequence[dict]) -> Optional[int]:
    """The data-parallel size of the controller's layout ({"optimizer_type", "ranks"} per rank list)."""
    lists = [entry["ranks"] for entry in layout if int(entry["optimizer_type"]) == 0]
    return len(lists[0]) if lists else None


def scale_events(events: Sequence[Tuple[float, str, str]], world_size: int,
                 layout: Sequence[dict] = ()) -> List[ScaleEvent]:
    """Each scale event in order. world_size: the ranks in the job (the controller's rank table); layout: the
    controller's layout now."""
    out: List[ScaleEvent] = []
    start_dp = _start_dp(events, world_size, layout)
    size_now, current = start_dp, None
    for t, kind, detail in events:
        if kind in ("scale_in", "scale_out"):
            current = _begin(out, t, kind, detail, size_now)
            if kind == "scale_out" and not _partial(detail):
                current.dp_after = start_dp
        elif current is None:
            continue
        elif kind == "left_with_slice":
            current.left_with_slice += _ranks_in(detail)
        elif kind in ("relayout", "relayout_incomplete"):
            lists = _layout_lists(kind, detail)
            current.dp_after = len(lists[0]) if lists else current.dp_after
        elif kind == "state" and current.outcome == "in progress":
            state = detail.partition("->")[2]
            if state in ("NORMAL", "EXIT", "FINAL"):
                current.outcome = "training goes on" if state == "NORMAL" else "job ended"
                size_now = current.dp_after if state == "NORMAL" else size_now
    return out


def scale_out_note(events: Sequence[Tuple[float, str, str]]) -> str:
    """The controller's latest word on a scale-out that has not happened (a return, the wait for the
    others, a return lost, the returned sent away) since the last scale-in; empty when there is none, or
    once a scale-out began (how it ended is its scale event's outcome)."""
    note, scaled_in = "", False
    for _, kind, detail in events:
        if kind in ("scale_in", "scale_out"):
            note, scaled_in = "", kind == "scale_in" or _partial(detail)
        elif not scaled_in:
            continue
        elif kind == "returned":
            note = f"{detail} returned after the scale-in"
        elif kind == "return_lost":
            rank, _, why = detail.partition(": ")
            note = f"{rank}, returned after the scale-in, was lost before the scale-out ({why})"
        elif kind in ("scale_out_wait", "scale_out_abandoned"):
            note = detail
    return note


def retired_ranks(events: Sequence[Tuple[float, str, str]]) -> Set[int]:
    """Ranks a scale-in retired (lost, or left with their slice) that no scale-out took back: events
    `retired` and `rejoined`."""
    retired: Set[int] = set()
    for _, kind, detail in events:
        if kind in ("retired", "rejoined") and _RANK.match(detail):
            rank = int(_RANK.match(detail).group(1))
            if kind == "retired":
                retired.add(rank)
            else:
                retired.discard(rank)
    return retired


def _begin(so_far: List[ScaleEvent], t: float, kind: str, detail: str, size_now: Optional[int]) -> ScaleEvent:
    match = _RANKS_AT_STEP.match(detail)
    if not match:
        raise ValueError(f"controller event {kind} {detail!r}: expected 'ranks [..] at step N[: why]'")
    ranks, step = _numbers(match.group(1)), int(match.group(2))
    if kind == "scale_in":
        event = ScaleEvent(len(so_far) + 1, t, "in", step, size_now, None, _reason(match.group(3)), lost=ranks)
    else:
        event = ScaleEvent(len(so_far) + 1, t, "out", step, size_now, None,
                           f"ranks {ranks} returned after the scale-in and are ready"
                           + (f" ({_reason(match.group(3))})" if match.group(3) else ""), returned=ranks)
    so_far.append(event)
    return event


def _partial(detail: str) -> bool:
    """A scale_out event of a partial scale-out: some retired ranks stay out (csrc/controller/scale_out.h)."""
    return ": partial, without ranks [" in detail


def _reason(text: Optional[str]) -> str:
    return (text or "").rstrip("; ")  # the controller's reason may end with its parts' separator


def _start_dp(events, world_size: int, layout: Sequence[dict]) -> Optional[int]:
    if not any(kind in ("scale_in", "scale_out") for _, kind, _ in events):
        return dp_size_of(layout)
    type0_counts = [sum(1 for entry in layout if int(entry["optimizer_type"]) == 0)]
    type0_counts += [len(_layout_lists(kind, detail)) for _, kind, detail in events
                     if kind in ("relayout", "relayout_incomplete")]
    for count in type0_counts:
        if count and world_size % count == 0:
            return world_size // count
    return None


def _layout_lists(kind: str, detail: str) -> List[List[int]]:
    """The type-0 rank lists of a relayout event (ReplicaManager::describe: "type 0 R=2 [0,1]; ...")."""
    if kind == "relayout_incomplete":
        detail = detail.partition(_INCOMPLETE_LAYOUT)[2]
    return [_numbers(ranks) for optimizer_type, ranks in _LAYOUT_SET.findall(detail) if optimizer_type == "0"]


def _ranks_in(detail: str) -> List[int]:
    match = _RANK_LIST.match(detail) or _RANK.match(detail)
    return _numbers(match.group(1)) if match else []


def _numbers(text: str) -> List[int]:
    return [int(n) for n in text.split(",") if n]
