"""A recovery's critical path across its ranks: each milestone (a mark of the ranks' recovery timelines)
is passed when the last rank reaches it, so that rank is the one the others waited for. Read in order,
the milestones say which phase took the recovery's time and on which rank (issue: repair at the speed
of the hardware needs to know where the time goes before it can be cut)."""
from dataclasses import dataclass
from typing import List, Sequence

from mindio_adaptor.status.timeline_picture import RankRecovery


@dataclass(frozen=True)
class Milestone:
    event: str  # the mark: detected, stopped, groups rebuilt, shard received, ...
    rank: int  # the last rank to reach it
    at_s: float  # since the first rank detected the fault, on the time axis all lanes share
    waited_s: float  # since the milestone before it


def critical_path(ranks: Sequence[RankRecovery]) -> List[Milestone]:
    """The milestones of one recovery, in the order they were passed."""
    zero = min(r.started_at_s for r in ranks)
    latest = {}
    for recovery in ranks:
        offset = recovery.started_at_s - zero
        for event, seconds, _ in recovery.marks:
            at = offset + seconds
            if event not in latest or at > latest[event][0]:
                latest[event] = (at, recovery.rank)
    path, previous = [], 0.0
    for event, (at, rank) in sorted(latest.items(), key=lambda item: item[1][0]):
        path.append(Milestone(event, rank, at, at - previous))
        previous = at
    return path


def describe(number: int, ranks: Sequence[RankRecovery]) -> str:
    """The critical path as text, the longest wait marked."""
    path = critical_path(ranks)
    longest = max(path, key=lambda m: m.waited_s)
    width = max(len(m.event) for m in path)
    lines = [f"recovery {number} at step {min(r.step for r in ranks)}: {path[-1].at_s:.2f} s from the first "
             f"detection to the last {path[-1].event}; each milestone is passed when its last rank reaches it"]
    for m in path:
        mark = "  <- longest wait" if m is longest and m.waited_s > 0 else ""
        lines.append(f"  {m.event:<{width}}  +{m.at_s:6.2f} s  rank {m.rank:<4}  waited {m.waited_s:5.2f} s{mark}")
    return "\n".join(lines)
