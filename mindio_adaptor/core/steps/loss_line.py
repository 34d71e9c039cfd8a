"""The loss line of the step a recovery goes on after: whether it is owed, and where its value comes from.

Megatron prints each step's loss line (`iteration N/ M | ... lm loss: ...`) on its last rank, once the
step's losses are reduced over the data-parallel group (for display only, after the update). A fault
there, or in the update of the step's other replica instance, leaves the repair step R complete but its
line unprinted; no rank computes R again, so nothing would print it. Every rank tells what it knows of
R (a `Report`, gathered over the job at the rollback) and all decide the same with `settle`:

- owed: the process that printed the job's lines before the fault (the printer) is alive and has not
  printed R. A dead printer may have printed R just before it died: R is owed only where no rank ever
  finished R's reduction, and then the value is lost with the printer's own part, so nothing is printed.
- the value: R's reduced losses, as any rank that finished the reduction holds them; else the reduction
  done again from every rank's own part (each rank's micro-batch losses of R), where every rank of the
  job at R is still there with its part (membership unchanged); else unknown, and nothing is printed
  (a wrong loss is worse than a missing one).
- only with a log interval of 1: Megatron's line of a longer interval averages steps the interrupted
  loop had accumulated and lost.
- its time per iteration: the longest time since the previous line any rank measured (a replacement measured
  none), the same on every rank.

A step that a recovery computes again (a reload from a checkpoint goes back several steps) is printed
by Megatron's loop again; the printer drops a line of a step it already printed (`LossLineBook`).
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

KEPT_STEPS = 4  # the records of the last steps this rank computed; a repair step is the last or the one before


@dataclass
class StepRecord:
    """What this rank knows of one step's losses."""
    local: Any = None  # Megatron's per-micro-batch loss dicts of this rank, before the reduction
    reduced: Optional[Dict[str, float]] = None  # the reduced losses, once the reduction finished here
    grad_norm: Optional[float] = None  # from this rank's optimizer step
    num_zeros: Optional[float] = None
    skipped: Optional[bool] = None  # the update was skipped (not successful)
    world_size: int = 0  # the job's size when this rank computed the step


@dataclass
class LossLineBook:
    """One process's records of its recent steps, and of the lines it printed (when it is the printer)."""
    steps: "OrderedDict[int, StepRecord]" = field(default_factory=OrderedDict)
    highest_printed: int = 0  # the last step whose line this process printed as the job's printer
    printer: bool = False  # this process was the last rank at its last training_log: it prints the lines
    line_step: Optional[int] = None  # the step whose training_log runs now

    def start(self, step: int, world_size: int) -> StepRecord:
        """A new record of `step` (computed again after a recovery, it replaces the interrupted one's)."""
        self.steps.pop(step, None)
        self.steps[step] = StepRecord(world_size=world_size)
        while len(self.steps) > KEPT_STEPS:
            self.steps.popitem(last=False)
        return self.steps[step]

    def record(self, step: int) -> StepRecord:
        return self.steps[step] if step in self.steps else self.start(step, 0)

    def printed_already(self, step: int) -> bool:
        return step <= self.highest_printed

    def report(self, step: int, interval_s: float = 0.0) -> "Report":
        """A process started in the recovery (a replacement) has no records: it reports none."""
        rec = self.steps.get(step, StepRecord())
        return Report(printer=self.printer, highest_printed=self.highest_printed,
                      reduced=rec.reduced, has_local=rec.local is not None,
                      world_size=rec.world_size, grad_norm=rec.grad_norm, num_zeros=rec.num_zeros,
                      skipped=rec.skipped, interval_s=interval_s)


@dataclass(frozen=True)
class Report:
    """What one rank tells the others about the repair step's line (plain data: gathered as objects)."""
    printer: bool
    highest_printed: int
    reduced: Optional[Dict[str, float]]
    has_local: bool
    world_size: int  # 0: this rank did not compute the step
    grad_norm: Optional[float]
    num_zeros: Optional[float]
    skipped: Optional[bool]
    interval_s: float = 0.0  # Megatron's time since the last line on this rank (0: none measured, a replacement)


@dataclass(frozen=True)
class Verdict:
    owed: bool
    source: Optional[str] = None  # "reduced" (a rank holds the value), "reduce" (reduce the parts again), None
    reduced: Optional[Dict[str, float]] = None
    grad_norm: Optional[float] = None
    num_zeros: Optional[float] = None
    skipped: bool = False
    interval_s: float = 0.0  # the line's time since the previous line: the longest any rank measured
    why_not: str = ""  # an owed line that cannot be printed: why


def settle(step: int, reports: Sequence[Report], log_interval: int) -> Verdict:
    """The same answer on every rank, from every rank's report (in rank order)."""
    printers = [r for r in reports if r.printer]
    finished = [r.reduced for r in reports if r.reduced is not None]
    owed = step > printers[0].highest_printed if printers else not finished
    if not owed or step % log_interval:
        return Verdict(owed=False)
    update = _update_of(reports)
    if not printers:
        return Verdict(owed=True, why_not="the rank that printed the losses died before its reduction of the "
                                          "step's losses finished, and its own part of them with it")
    if log_interval != 1:
        return Verdict(owed=True, why_not=f"with --log-interval {log_interval} the line averages the steps of "
                                          f"its interval, which the interrupted train loop had summed")
    if update is None:
        return Verdict(owed=True, why_not="no rank holds the step's gradient norm")
    interval_s = max(r.interval_s for r in reports)
    if interval_s <= 0:
        return Verdict(owed=True, why_not="no rank measured the time since the previous line, which the line "
                                          "divides by")
    if finished:
        return Verdict(owed=True, source="reduced", reduced=finished[0], interval_s=interval_s, **update)
    missing = _without_part(reports)
    if missing:
        return Verdict(owed=True, why_not=f"the step's losses were not reduced before the fault and ranks "
                                          f"{missing} no longer hold their part of them")
    return Verdict(owed=True, source="reduce", interval_s=interval_s, **update)


def _update_of(reports: Sequence[Report]) -> Optional[dict]:
    """The step's gradient norm, zeros and skip, as Megatron reduces them over the model-parallel group
    (the largest value), from the ranks whose optimizer step finished."""
    done = [r for r in reports if r.grad_norm is not None and r.skipped is not None]
    if not done:
        return None
    zeros = [r.num_zeros for r in done if r.num_zeros is not None]
    return dict(grad_norm=max(r.grad_norm for r in done), num_zeros=max(zeros) if zeros else None,
                skipped=any(r.skipped for r in done))


def _without_part(reports: Sequence[Report]) -> List[int]:
    """Ranks whose part of the step's losses is missing, or every rank when the job's size changed."""
    size = len(reports)
    if any(r.world_size != size for r in reports if r.has_local):
        return list(range(size))
    return [rank for rank, r in enumerate(reports) if not r.has_local]
