"""Fault events fed to the policy engine, and the JSON-lines event log `policy explain` replays.

Log format, one JSON object per line (blank lines and lines starting with '#' are skipped):

    {"time": 12.5, "code": "80E01801", "device": 3, "kind": "occur"}
    {"time": 40, "code": "80E01801", "device": 3, "kind": "recover"}
    {"time": 90, "device": 3, "kind": "clear"}
    {"time": 95, "code": "8C1F0001", "device": 1, "kind": "occur", "severity": "minor"}

`time` is in seconds (any origin, non-decreasing), `device` a device or rank number ("rank" is
accepted as another name for it), `kind` one of occur / recover / clear (an operator clearing a
sticky isolation; no code), `severity` optional: what the source reported, used only for codes that
faultCode.json does not list.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Iterator, Optional

from mindio_adaptor.core.policy.rules import json_kind, normalize_code

OCCUR = "occur"
RECOVER = "recover"
CLEAR = "clear"
EVENT_KINDS = (OCCUR, RECOVER, CLEAR)


def seconds(value: float) -> str:
    """A time for people: whole seconds without a fraction, otherwise to the millisecond; never
    the exponent form, which would garble epoch timestamps."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value):
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


class EventLogError(ValueError):
    """An event log line that cannot be understood; the message names the file and line."""


@dataclass(frozen=True)
class FaultEvent:
    time: float
    device: int
    kind: str
    code: str = ""
    severity: Optional[str] = None


def event_from_dict(record: object) -> FaultEvent:
    """A FaultEvent from one parsed log record; ValueError says what is wrong with it."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {json_kind(record)}")
    kind = record.get("kind")
    if kind not in EVENT_KINDS:
        raise ValueError(f"kind must be one of {', '.join(EVENT_KINDS)}, got {json_kind(kind)}")
    time = record.get("time")
    if isinstance(time, bool) or not isinstance(time, (int, float)) or not math.isfinite(time):
        raise ValueError(f"time must be a number of seconds, got {json_kind(time)}")
    device = record.get("device", record.get("rank"))
    if isinstance(device, bool) or not isinstance(device, int):
        raise ValueError(f"device (or rank) must be an integer, got {json_kind(device)}")
    code = record.get("code", "")
    if kind != CLEAR and (not isinstance(code, str) or not code.strip()):
        raise ValueError(f"code must be a fault code string, got {json_kind(code)}")
    severity = record.get("severity")
    if severity is not None and not isinstance(severity, str):
        raise ValueError(f"severity must be a string, got {json_kind(severity)}")
    return FaultEvent(float(time), device, kind, normalize_code(code) if code else "", severity)


def read_event_log(path: str) -> Iterator[FaultEvent]:
    """The events of a JSON-lines log, in file order; times must not go backwards."""
    if not os.path.isfile(path):
        raise EventLogError(f"{path}: {'not a regular file' if os.path.exists(path) else 'no such file'}")
    previous = -math.inf
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                event = event_from_dict(json.loads(text))
            except ValueError as error:
                raise EventLogError(f"{path} line {number}: {error}") from None
            if event.time < previous:
                raise EventLogError(f"{path} line {number}: time {seconds(event.time)} is before the "
                                    f"previous event's {seconds(previous)}; events must be in time order")
            previous = event.time
            yield event
