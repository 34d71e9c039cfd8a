"""Each recovery as a picture, from the logs a job already writes: one lane per rank, one bar per phase
(from one mark of the rank's recovery timeline, core/steps/recovery_timeline, to the next), one panel per
recovery.

Every rank logs a line per recovery when it ends: `recovery N on rank R, step S, CAUSE: detected +0.00 s,
stopped +0.31 s, ...; OUTCOME`, prefixed by `[mindio HH:MM:SS.mmm rank R]`. The marks are seconds on the
rank's own clock from its detection; the prefix's wall-clock time of the line (written at the last mark)
places each lane on a time axis shared by all ranks (the hosts' clocks are assumed in step, as NTP keeps
them; the logs carry no date, so a recovery across midnight is drawn wrong).
"""
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

_LINE = re.compile(r"(?:\[mindio (\d\d):(\d\d):(\d\d)\.(\d{3}) rank [^\]]*\] \w+ )?\s*"
                   r"recovery (\d+) on rank (\d+), step (\d+), (.*?): (.*); ([^;]*)$")
_MARK = re.compile(r"(.+?) \+(\d+(?:\.\d+)?) s(?: \(([^)]*)\))?$")


class NoRecoveries(ValueError):
    pass


@dataclass
class RankRecovery:
    number: int
    rank: int
    step: int
    cause: str
    marks: List[Tuple[str, float, str]]  # (event, seconds since detection, detail)
    outcome: str
    logged_at_s: Optional[float]  # wall-clock seconds of day when the line was written

    @property
    def started_at_s(self) -> float:
        """Wall-clock seconds of day of its detection (0 when the log line has no time prefix)."""
        if self.logged_at_s is None:
            return 0.0
        return self.logged_at_s - (self.marks[-1][1] if self.marks else 0.0)


def parse_line(line: str) -> Optional[RankRecovery]:
    match = _LINE.search(line.rstrip("\n"))
    if match is None:
        return None
    hh, mm, ss, ms, number, rank, step, cause, marks, outcome = match.groups()
    parsed = [_MARK.match(part.strip()) for part in marks.split(", ")]
    if not all(parsed):
        return None
    logged = None if hh is None else int(hh) * 3600 + int(mm) * 60 + int(ss) + int(ms) / 1000
    return RankRecovery(int(number), int(rank), int(step), cause,
                        [(m.group(1), float(m.group(2)), m.group(3) or "") for m in parsed], outcome, logged)


def read_recoveries(paths: Iterable[Path]) -> Dict[int, List[RankRecovery]]:
    """recovery number -> each rank's timeline of it (a rank's summary repeats its lines: kept once)."""
    seen: Dict[Tuple[int, int], RankRecovery] = {}
    for path in paths:
        for line in Path(path).read_text(errors="replace").splitlines():
            recovery = parse_line(line)
            if recovery is not None and (recovery.number, recovery.rank) not in seen:
                seen[(recovery.number, recovery.rank)] = recovery
    by_number: Dict[int, List[RankRecovery]] = {}
    for (number, _), recovery in sorted(seen.items()):
        by_number.setdefault(number, []).append(recovery)
    return by_number


def phases(recovery: RankRecovery) -> List[Tuple[str, float, float]]:
    """(phase, start, end) in seconds since detection: each phase is named by the mark that ends it."""
    return [(event, start, end) for (_, start, _), (event, end, _) in zip(recovery.marks, recovery.marks[1:])]


def draw(by_number: Dict[int, List[RankRecovery]], out: Path) -> None:
    """One panel per recovery, one lane per rank; .svg keeps text as text and names each bar
    `rank<R>-<phase>` (its SVG id), .png is a 120 dpi image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not by_number:
        raise NoRecoveries("no recovery line (`recovery N on rank R, ...`) in the logs given")
    plt.rcParams["svg.fonttype"] = "none"
    events = sorted({p for rs in by_number.values() for r in rs for p, _, _ in phases(r)}, key=_first_seen(by_number))
    colours = {event: plt.get_cmap("tab10")(i % 10) for i, event in enumerate(events)}
    fig, axes = plt.subplots(len(by_number), 1, squeeze=False,
                             figsize=(11, 1.2 + sum(0.45 * len(rs) + 0.9 for rs in by_number.values())))
    for ax, (number, ranks) in zip(axes[:, 0], sorted(by_number.items())):
        _panel(ax, number, ranks, colours)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[e], label=e) for e in events]
    rows = (len(handles) + 3) // 4
    fig.legend(handles=handles, loc="lower center", ncol=min(4, max(1, len(handles))), fontsize=8, frameon=False,
               title="each bar ends when its rank reached this mark", title_fontsize=8)
    fig.tight_layout(rect=(0, min(0.5, (0.45 + 0.22 * rows) / fig.get_figheight()), 1, 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _first_seen(by_number):
    order: Dict[str, float] = {}
    for rs in by_number.values():
        for r in rs:
            for event, start, _ in phases(r):
                order[event] = min(order.get(event, start), start)
    return lambda event: order[event]


def _panel(ax, number: int, ranks: Sequence[RankRecovery], colours) -> None:
    zero = min(r.started_at_s for r in ranks)
    for lane, recovery in enumerate(sorted(ranks, key=lambda r: r.rank)):
        offset = recovery.started_at_s - zero
        for event, start, end in phases(recovery):
            bar = ax.barh(lane, max(end - start, 0.002), left=offset + start, color=colours[event], height=0.6)
            bar.patches[0].set_gid(f"rank{recovery.rank}-{event.replace(' ', '_')}")
    ax.set_yticks(range(len(ranks)), [f"rank {r.rank}" for r in sorted(ranks, key=lambda r: r.rank)])
    ax.invert_yaxis()
    causes = sorted({r.cause for r in ranks})
    outcomes = sorted({r.outcome for r in ranks})
    ax.set_title(f"recovery {number} at step {min(r.step for r in ranks)}: {'; '.join(causes)} -> "
                 f"{'; '.join(outcomes)}", fontsize=9, loc="left")
    ax.set_xlabel("seconds since the first rank detected it", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
