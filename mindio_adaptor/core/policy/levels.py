"""Fault levels (the reference's handling names), ordered by severity.

The members keep the reference's spelling ("SeparateNPU", not SEPARATE_NPU) because operators read
and write these names in faultCode.json and faultCustomization.json; one spelling everywhere avoids
a translation table that could drift. The integer value is the severity: a larger value wins.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Iterable, Optional


class Level(IntEnum):
    NotHandleFault = 0
    SubHealthFault = 1
    RestartRequest = 2
    RestartBusiness = 3
    FreeRestartNPU = 4
    RestartNPU = 5
    PreSeparateNPU = 6
    SeparateNPU = 7
    ManuallySeparateNPU = 8

    def __str__(self) -> str:
        return self.name


# Levels a faultCode.json may list codes under (key = name + "Codes"). ManuallySeparateNPU is only
# ever the outcome of an escalation rule, never a fault's own level.
CODE_LEVELS = tuple(level for level in Level if level is not Level.ManuallySeparateNPU)

# Reported severities that mean "no impact" for a code that no faultCode.json lists.
HARMLESS_SEVERITIES = frozenset({"hint", "minor"})


def parse_level(name: object) -> Optional[Level]:
    """The level called `name` (exact reference spelling), or None when it names no level."""
    if isinstance(name, str) and name in Level.__members__:
        return Level[name]
    return None


def level_for_severity(severity: Optional[str]) -> Level:
    """How an unknown fault code is handled: by the severity its source reported. Only an explicit
    "hint" or "minor" is harmless; a missing or unrecognised severity is treated as the worst
    non-sticky case, because guessing low on an unknown fault risks training on a broken device."""
    if isinstance(severity, str) and severity.strip().lower() in HARMLESS_SEVERITIES:
        return Level.NotHandleFault
    return Level.SeparateNPU


def most_severe(levels: Iterable[Optional[Level]]) -> Level:
    """The most severe of `levels`, ignoring None; NotHandleFault when there is none."""
    return max((level for level in levels if level is not None), default=Level.NotHandleFault)
