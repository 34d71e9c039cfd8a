"""The hang rule's time limits: per section (train step, checkpoint save, evaluation, start-up), derived from what
this job has measured, so a hang is found in seconds on a job whose steps take a second, and not
misjudged on one whose steps take a minute.

    limit = max(floor, factor x median of the last `window` durations)

The first `warmup` sections are not measured (first-step compilation, allocation, lazily created
communicators); until `min_samples` durations exist the limit is `initial_s`, the collective timeout a
stock job would wait anyway. A section that ended in an exception is not measured. A fixed limit from
the environment (e.g. MINDIO_STEP_TIMEOUT_S) replaces the rule for that section.

Why these defaults: a train step's floor of 12 s outlasts the stalls a busy host gives a process
(several seconds, or a rank stopped for three heartbeat periods) and still finds a hang within 15 s;
a save writes files and its floor is 60 s; evaluation runs many forward passes, 30 s. Start-up (model,
optimizer, checkpoint load, data loaders) happens once per process and is never measured: its limit is
the collective timeout, or MINDIO_STARTUP_TIMEOUT_S.
"""
from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, Mapping, Optional, Tuple

from mindio_adaptor.core.process.env_values import seconds_from_env


@dataclass(frozen=True)
class SectionRule:
    floor_s: float
    factor: float
    initial_s: float
    warmup: int = 1
    min_samples: int = 2
    window: int = 50

    def __post_init__(self):
        if not (self.floor_s > 0 and self.factor >= 1 and self.initial_s > 0):
            raise ValueError(f"invalid section rule {self}: floor and initial limit must be positive, factor >= 1")
        if self.warmup < 0 or self.min_samples < 1 or self.window < self.min_samples:
            raise ValueError(f"invalid section rule {self}: warmup >= 0, 1 <= min_samples <= window")


SECTIONS = ("step", "save", "eval", "startup")
# The env variable that fixes each section's limit, in seconds.
FIXED_LIMIT_ENV = {"step": "MINDIO_STEP_TIMEOUT_S", "save": "MINDIO_SAVE_TIMEOUT_S", "eval": "MINDIO_EVAL_TIMEOUT_S",
                   "startup": "MINDIO_STARTUP_TIMEOUT_S"}
STEP_FLOOR_ENV = "MINDIO_HANG_FLOOR_S"
# A process starts up once, so its start-up is never measured: its limit is the initial one.
DEFAULT_FLOORS = {"step": 12.0, "save": 60.0, "eval": 30.0, "startup": 60.0}
DEFAULT_FACTORS = {"step": 10.0, "save": 4.0, "eval": 5.0, "startup": 1.0}


def default_rules(initial_s: float, step_floor_s: float = DEFAULT_FLOORS["step"]) -> Dict[str, SectionRule]:
    floors = {**DEFAULT_FLOORS, "step": step_floor_s}
    return {name: SectionRule(floors[name], DEFAULT_FACTORS[name], max(initial_s, floors[name]))
            for name in SECTIONS}


class SectionLimits:
    """Durations measured per section and the limit each gets next."""

    def __init__(self, rules: Mapping[str, SectionRule], fixed_s: Optional[Mapping[str, float]] = None):
        unknown = set(fixed_s or {}) - set(rules)
        if unknown:
            raise ValueError(f"fixed limits for unknown sections {sorted(unknown)}; known: {sorted(rules)}")
        self.rules = dict(rules)
        self.fixed_s = dict(fixed_s or {})
        self._seen: Dict[str, int] = {name: 0 for name in rules}
        self._durations: Dict[str, Deque[float]] = {name: deque(maxlen=r.window) for name, r in rules.items()}

    def limit(self, section: str) -> Tuple[float, str]:
        """(seconds, how it was derived) for the next `section`."""
        rule = self._rule(section)
        if section in self.fixed_s:
            return self.fixed_s[section], f"fixed by {FIXED_LIMIT_ENV.get(section, section)}"
        durations = self._durations[section]
        if len(durations) < rule.min_samples:
            return rule.initial_s, f"initial ({len(durations)} of {rule.min_samples} durations measured)"
        median = statistics.median(durations)
        if rule.factor * median > rule.floor_s:
            return rule.factor * median, f"{rule.factor:g} x median {median:.3f} s"
        return rule.floor_s, f"floor (median {median:.3f} s)"

    def record(self, section: str, seconds: float) -> None:
        """A section that completed normally took `seconds`."""
        rule = self._rule(section)
        self._seen[section] += 1
        if self._seen[section] > rule.warmup:
            self._durations[section].append(float(seconds))

    def _rule(self, section: str) -> SectionRule:
        try:
            return self.rules[section]
        except KeyError:
            raise ValueError(f"unknown section {section!r}; known: {sorted(self.rules)}") from None


def limits_from_env(initial_s: float, environ: Mapping[str, str] = os.environ) -> SectionLimits:
    """The job's limits: the default rules with `initial_s` (the collective timeout) before anything
    is measured, the step floor and any fixed limits from the environment."""
    floor = seconds_from_env(STEP_FLOOR_ENV, DEFAULT_FLOORS["step"], 1, 24 * 3600, environ)
    fixed = {}
    for section, name in FIXED_LIMIT_ENV.items():
        seconds = seconds_from_env(name, None, 1, 7 * 24 * 3600, environ)
        if seconds is not None:
            fixed[section] = seconds
    return SectionLimits(default_rules(initial_s, floor), fixed)
