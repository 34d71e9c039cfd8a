"""The effective rules read from faultCode.json and faultCustomization.json, as plain data.

Ranges and defaults are the reference's (MindCluster device plugin). Everything here is immutable:
the engine reads a `PolicyConfig` and never changes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from mindio_adaptor.core.policy.levels import Level, level_for_severity

NETWORK_FAULT_CODE = "81078603"

# (minimum, maximum, default) in seconds.
GRACE_TOLERANCE_RANGES: Mapping[str, Tuple[int, int, int]] = {
    "WaitProcessReadCMTime": (5, 90, 30),
    "WaitDeviceResetTime": (60, 180, 150),
    "WaitFaultSelfHealingTime": (1, 30, 15),
}
TIME_WINDOW_RANGE = (60, 864000)
TIMES_RANGE = (1, 100)
# The reference gives no range for ReleaseTimeWindow; we hold it to TimeWindow's, so a typo such
# as 0 or a negative number cannot free an isolation at once.
RELEASE_TIME_WINDOW_RANGE = (60, 864000)
FAULT_TIMEOUT_RANGE = (0, 600)
RECOVER_TIMEOUT_RANGE = (0, 86400)
DEFAULT_DURATION = (0, 0)
NETWORK_FAULT_DEFAULT_DURATION = (20, 60)
NETWORK_FAULT_HANDLINGS = frozenset({Level.NotHandleFault, Level.PreSeparateNPU, Level.SeparateNPU})


class PolicyFileError(ValueError):
    """A configuration file that cannot be used at all (missing, unreadable, not JSON, wrong shape)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class ConfigIssue:
    """One item of a configuration file that was ignored or replaced by its default, and why."""

    source: str
    item: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}: {self.item}: {self.problem}"


@dataclass(frozen=True)
class GraceTolerance:
    wait_process_read_cm_time: int = 30
    wait_device_reset_time: int = 150
    wait_fault_self_healing_time: int = 15


@dataclass(frozen=True)
class FrequencyRule:
    """`times` occurrences of `code` on one device within `time_window` seconds escalate it to
    `handling`; `release_time_window` (if set) frees that escalation after so long without the fault."""

    code: str
    time_window: int
    times: int
    handling: Level
    release_time_window: Optional[int]
    origin: str  # e.g. "FaultFrequency[2]", to point the operator at the rule


@dataclass(frozen=True)
class DurationRule:
    """A fault of `code` lasting `fault_timeout` seconds escalates to `handling`; after it recovers,
    the handling holds until the fault has stayed away for `recover_timeout` seconds."""

    code: str
    fault_timeout: int
    recover_timeout: int
    handling: Level
    origin: str


@dataclass(frozen=True)
class Customization:
    """The effective content of one faultCustomization.json."""

    grace: GraceTolerance = GraceTolerance()
    frequency: Mapping[str, FrequencyRule] = field(default_factory=dict)
    duration: Mapping[str, DurationRule] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyConfig:
    """Both files' effective rules, plus every item that was ignored on the way."""

    levels: Mapping[str, Level] = field(default_factory=dict)
    customization: Customization = Customization()
    issues: Tuple[ConfigIssue, ...] = ()
    sources: Tuple[str, ...] = ()

    def level_of(self, code: str, severity: Optional[str] = None) -> Level:
        level = self.levels.get(code)
        return level if level is not None else level_for_severity(severity)

    def frequency_rule(self, code: str) -> Optional[FrequencyRule]:
        return self.customization.frequency.get(code)

    def duration_rule(self, code: str) -> Optional[DurationRule]:
        return self.customization.duration.get(code)


def normalize_code(code: str) -> str:
    """Fault codes are hex strings; compare them case-insensitively and without stray blanks."""
    return code.strip().upper()


def json_kind(value: object) -> str:
    """How a JSON value reads in an error message."""
    return {dict: "an object", list: "a list", str: f"the string {value!r}", bool: f"{value}".lower(),
            type(None): "null"}.get(type(value), f"the number {value!r}")

