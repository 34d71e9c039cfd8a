"""What high availability runs on the training thread in each step, part by part.

A fault-tolerance layer is paid for on every step of every job. Each part of it on the step's path (the snapshot of
the completed step, the update brackets and timed sections reported to the controller, the controller's event
watches, the step's replay record, the signal check, the holders' fingerprints) is timed here when it runs: its
calls and nanoseconds, counted from the end of the first step (the first one compiles, allocates and announces).
At the end of training each rank says once what the parts cost per step, beside what its processor sent the
controller (frames, bytes) and the locks it took, and the CPU its background threads used.

bench/replica_overhead.py prints the parts per step beside its step time ratio; tests/e2e/test_step_path_budget.py
holds every rank's calls, frames, bytes and locks per step to a budget (and tests/integration/
test_processor_step_counts.py one step's frames against a real controller), so that the next regression is seen by
counting, which noisy machines do not disturb, rather than by timing.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional

# The native threads' names (csrc: processor and controller), whose CPU the line reports.
BACKGROUND_THREAD_PREFIX = "mindio-"


@dataclass
class StepPathCosts:
    clock: Callable[[], int] = time.perf_counter_ns
    calls: Dict[str, int] = field(default_factory=dict)
    nanoseconds: Dict[str, int] = field(default_factory=dict)
    steps: int = 0  # completed since counting started
    counting: bool = False
    counters_at_start: Dict[str, float] = field(default_factory=dict)  # of counters(): processor, threads

    def timed(self, part: str, fn: Callable) -> Callable:
        """`fn`, timed as `part` whenever it runs."""

        def timed_part(*args, **kwargs):
            started = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(part, self.clock() - started)

        timed_part.__wrapped__ = fn
        timed_part.__name__ = getattr(fn, "__name__", part)
        return timed_part

    def add(self, part: str, nanoseconds: int) -> None:
        if self.counting:
            self.calls[part] = self.calls.get(part, 0) + 1
            self.nanoseconds[part] = self.nanoseconds.get(part, 0) + nanoseconds

    def step_completed(self, counters: Callable[[], Mapping[str, float]]) -> None:
        """A step ended; the first one starts the count. `counters()`: the running totals to report per step
        (frames sent, background CPU), read only then and at the end: reading them costs more than a step's parts."""
        if self.counting:
            self.steps += 1
            return
        self.counting = True
        self.counters_at_start = dict(counters())

    def per_step(self) -> Dict[str, tuple]:
        """part -> (calls per step, microseconds per step), over the steps counted."""
        steps = max(self.steps, 1)
        return {part: (self.calls[part] / steps, self.nanoseconds[part] / 1000 / steps) for part in sorted(self.calls)}

    def line(self, counters: Mapping[str, float]) -> Optional[str]:
        """What the steps cost, in one line (None before two steps completed)."""
        if self.steps == 0:
            return None
        parts = self.per_step()
        total_us = sum(us for _, us in parts.values())
        said = ", ".join(f"{part} {us:.0f} us ({calls:g} calls)" for part, (calls, us) in parts.items())
        grown = {name: (counters.get(name, 0) - self.counters_at_start.get(name, 0)) / self.steps
                 for name in counters}
        sent = ", ".join(f"{name} {value:.1f}" for name, value in sorted(grown.items()))
        return (f"high availability on the step path: {self.steps} steps after the first, per step {total_us:.0f} us "
                f"in all: {said or 'nothing'}; per step {sent or 'no counters'}")


LINE = re.compile(r"high availability on the step path: (\d+) steps after the first, per step (\d+) us in all: "
                  r"(.*?); per step (.*)$", re.M)
_PART = re.compile(r"([\w -]+?) (\d+) us \(([\d.e+-]+) calls\)")
_COUNTER = re.compile(r"([\w -]+?) ([\d.]+)(?:, |$)")


def parse_line(text: str) -> Optional[dict]:
    """The last such line of `text` as {"steps", "total_us", "parts": {part: (calls, us)}, "counters": {...}}."""
    found = list(LINE.finditer(text))
    if not found:
        return None
    steps, total, parts, counters = found[-1].groups()
    return {"steps": int(steps), "total_us": int(total),
            "parts": {m.group(1).strip(): (float(m.group(3)), int(m.group(2))) for m in _PART.finditer(parts)},
            "counters": {m.group(1).strip(): float(m.group(2)) for m in _COUNTER.finditer(counters)}}


def background_cpu_ms() -> float:
    """CPU milliseconds this process's native high-availability threads used so far (0 where /proc has no
    threads to read)."""
    total_ticks = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # the thread ended
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if name.startswith(BACKGROUND_THREAD_PREFIX):
            total_ticks += int(rest[11]) + int(rest[12])  # utime, stime
    return 1000.0 * total_ticks / os.sysconf("SC_CLK_TCK")


COSTS = StepPathCosts()
