"""Each recovery as one timeline, per rank: when the fault was seen, and how long after it this rank was
stopped, had its groups rebuilt, sent or received state (bytes), rolled back, and completed its first
step again. One log line per recovery when it ends, and a summary of all of them at the end of the run.
Times are this process's monotonic clock; the first mark of a recovery is its zero."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class Recovery:
    number: int
    step: int  # the step the fault interrupted (0 for a replacement process: it had none)
    cause: str
    started: float = field(default_factory=time.monotonic)
    marks: List[Tuple[str, float, str]] = field(default_factory=list)  # (event, seconds, detail)
    outcome: str = ""

    def mark(self, event: str, detail: str = "") -> None:
        self.marks.append((event, time.monotonic() - self.started, detail))

    def line(self, rank: int) -> str:
        steps = ", ".join(f"{event} +{seconds:.2f} s" + (f" ({detail})" if detail else "")
                          for event, seconds, detail in self.marks)
        return (f"recovery {self.number} on rank {rank}, step {self.step}, {self.cause}: {steps}; "
                f"{self.outcome or 'unfinished'}")


class Timeline:
    def __init__(self):
        self.recoveries: List[Recovery] = []

    @property
    def current(self) -> Optional[Recovery]:
        last = self.recoveries[-1] if self.recoveries else None
        return last if last is not None and not last.outcome else None

    def begin(self, step: int, cause: str) -> Recovery:
        """A fault was seen (or a replacement process reported ready); a repeat while one runs is kept."""
        if self.current is None:
            self.recoveries.append(Recovery(len(self.recoveries) + 1, step, cause))
            self.current.mark("detected")
        return self.current

    def mark(self, event: str, detail: str = "") -> None:
        if self.current is not None:
            self.current.mark(event, detail)

    def end(self, outcome: str) -> Optional[Recovery]:
        """The recovery finished (training goes on) or ended the job; returns it for the log."""
        recovery = self.current
        if recovery is not None:
            recovery.mark(outcome)
            recovery.outcome = outcome
        return recovery

    def summary(self, rank: int) -> str:
        if not self.recoveries:
            return f"rank {rank}: no recovery in this run"
        lines = [f"rank {rank}: {len(self.recoveries)} recovery(ies) in this run"]
        lines += [f"  {r.line(rank)}" for r in self.recoveries]
        return "\n".join(lines)
