"""The nodes that caused faults, remembered across the job's restarts in a small JSON file, and which of
them are repeat offenders: a node with MINDIO_OFFENDER_TIMES incidents (default 3) within
MINDIO_OFFENDER_WINDOW_S (default a day).

An incident is a fault that names one node: a rank's process died or hung there, a memory error was
reported there, or a rank there reported sub-health (e.g. its copy of an optimizer shard was found
corrupted). status/offender_watch decides what counts; this file only keeps the record.

The file is MINDIO_OFFENDER_FILE, else ``$XDG_STATE_HOME/mindio_adaptor/offenders.json`` (``~/.local/state``
when unset): one per user and machine, so a job started again on the same machine reads what the last
one wrote. It is written whole and renamed into place, so a reader never sees half of it. A file that
cannot be read as a record is set aside (renamed with a ``.unreadable-<time>`` suffix, nothing deleted)
with a warning naming the problem, and a new record starts."""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from mindio_adaptor.core.process.env_values import seconds_from_env

logger = logging.getLogger(__name__)

FILE_ENV = "MINDIO_OFFENDER_FILE"
TIMES_ENV = "MINDIO_OFFENDER_TIMES"
WINDOW_ENV = "MINDIO_OFFENDER_WINDOW_S"
DEFAULT_TIMES = 3
DEFAULT_WINDOW_S = 24 * 3600.0
FORMAT = 1


class OffenderSettingError(ValueError):
    """A MINDIO_OFFENDER_* variable is unusable; the message names it."""


@dataclass(frozen=True)
class Incident:
    time: float  # seconds since the epoch
    node: str
    rank: int
    what: str  # e.g. "node fault", "memory fault", "sub-health MINDIO-SDC"

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.time))


def default_path(environ: Mapping[str, str] = os.environ) -> Path:
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "mindio_adaptor" / "offenders.json"


def times_from_env(environ: Mapping[str, str] = os.environ) -> int:
    value = environ.get(TIMES_ENV, "").strip()
    if not value:
        return DEFAULT_TIMES
    if not value.isdigit() or not 1 <= int(value) <= 1000:
        raise OffenderSettingError(f"{TIMES_ENV}={value!r}: expected a whole number of incidents within 1..1000")
    return int(value)


class OffenderRecord:
    def __init__(self, path: Path, times: int = DEFAULT_TIMES, window_s: float = DEFAULT_WINDOW_S):
        self.path, self.times, self.window_s = Path(path), times, window_s

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "OffenderRecord":
        try:
            window = seconds_from_env(WINDOW_ENV, DEFAULT_WINDOW_S, 60, 365 * 24 * 3600.0, environ)
        except ValueError as err:
            raise OffenderSettingError(str(err)) from None
        return cls(Path(environ.get(FILE_ENV) or default_path(environ)), times_from_env(environ), window)

    def incidents(self) -> List[Incident]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as err:
            logger.warning("offender record %s cannot be read (%s): no node is remembered", self.path, err)
            return []
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            return [Incident(float(i["time"]), str(i["node"]), int(i["rank"]), str(i["what"]))
                    for i in data["incidents"]]
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            self._set_aside(f"{type(err).__name__}: {err}")
            return []

    def note(self, incident: Incident) -> Optional[List[Incident]]:
        """Remember the incident; the node's incidents within the window when this one made it a repeat
        offender (it has exactly `times` now), else None."""
        kept = [i for i in self.incidents() if i.time > incident.time - self.window_s] + [incident]
        self._write(kept)
        mine = [i for i in kept if i.node == incident.node]
        return mine if len(mine) == self.times else None

    def offenders(self, now: Optional[float] = None,
                  incidents: Optional[List[Incident]] = None) -> Dict[str, List[Incident]]:
        """Every node with at least `times` incidents within the window before `now`; of `incidents` when
        given (as read from the record already), else of the record."""
        now = time.time() if now is None else now
        recent: Dict[str, List[Incident]] = {}
        for incident in self.incidents() if incidents is None else incidents:
            if now - self.window_s < incident.time <= now:
                recent.setdefault(incident.node, []).append(incident)
        return {node: found for node, found in recent.items() if len(found) >= self.times}

    def describe(self, node: str, incidents: List[Incident]) -> str:
        listed = ", ".join(f"{i.what} of rank {i.rank} at {i.when}" for i in incidents)
        return (f"node {node} is a repeat offender: {len(incidents)} incidents within {self.window_s / 3600:g} h "
                f"({listed})")

    def forget(self, node: str) -> int:
        """Drop every incident of `node` (an operator returned it to service); how many were dropped."""
        incidents = self.incidents()
        kept = [i for i in incidents if i.node != node]
        self._write(kept)
        return len(incidents) - len(kept)

    def _write(self, incidents: List[Incident]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"format": FORMAT, "incidents": [asdict(i) for i in incidents]}, indent=1),
                             encoding="utf-8")
        os.replace(temporary, self.path)

    def _set_aside(self, problem: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
        try:
            os.replace(self.path, aside)
        except OSError as err:
            logger.warning("offender record %s is unreadable (%s) and cannot be set aside (%s)", self.path,
                           problem, err)
            return
        logger.warning("offender record %s is unreadable (%s): set aside as %s, a new record starts", self.path,
                       problem, aside)
