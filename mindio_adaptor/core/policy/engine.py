"""The policy engine: fault events in, the handling of each fault and each device's isolation out.

Time is whatever the caller says it is (seconds on any clock): the engine never reads a clock, so a
day of faults replays in microseconds and the controller can drive it from its own timers.

Semantics the reference leaves open, chosen as a demanding operator would expect:
- Every `occur` event is one occurrence for a FaultFrequency rule (a fault reported twice is two
  faults), except for codes that also have a FaultDuration rule: there only faults that timed out
  count, once each.
- The sliding window holds occurrences newer than `TimeWindow` seconds: one exactly TimeWindow
  seconds old has left it. Timeouts, recoveries and releases fire once their time is reached (>=).
- A fault with a FaultDuration rule that recovers is not gone at once: its handling holds until it
  has stayed away RecoverTimeout seconds. If it comes back before that it is the same fault, still
  timing from its first occurrence, so a flapping link reaches FaultTimeout too.
- ManuallySeparateNPU makes the device's isolation sticky: it survives the fault's recovery and
  ends only when an operator clears the device or, for a FaultFrequency rule with
  ReleaseTimeWindow, when that fault has been absent (not active, not re-reported) for that long.
  Clearing or releasing also restarts that device's frequency counts, so one more fault does not
  re-isolate a device the operator just returned to service.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import replace
from enum import Enum
from typing import Deque, Dict, List, NamedTuple, Optional

from mindio_adaptor.core.policy.events import CLEAR, OCCUR, RECOVER, FaultEvent, seconds
from mindio_adaptor.core.policy.levels import Level, most_severe
from mindio_adaptor.core.policy.rules import DurationRule, FrequencyRule, PolicyConfig, normalize_code

# Kinds of decisions the engine makes on its own when a time is reached.
TIMEOUT = "timeout"
RECOVERED = "recovered"
RELEASE = "release"


class Isolation(str, Enum):
    """What the scheduler may do with a device."""

    NONE = "none"
    PRE_SEPARATED = "pre-separated"  # keep running, place nothing new here
    SEPARATED = "separated"  # out of service while a fault lasts
    MANUALLY_SEPARATED = "manually-separated"  # out of service until an operator (or release) frees it

    def __str__(self) -> str:
        return self.value


def isolation_of_level(level: Level) -> Isolation:
    """The isolation a live fault of `level` imposes (stickiness is tracked apart, see module doc)."""
    if level >= Level.SeparateNPU:
        return Isolation.SEPARATED
    if level == Level.PreSeparateNPU:
        return Isolation.PRE_SEPARATED
    return Isolation.NONE


class Decision(NamedTuple):
    """What the engine decided at `time` for `code` on `device`.

    `level` is the handling in force for that fault after the event (NotHandleFault once it is
    gone, and for an operator's clear, which concerns no one fault), `isolation` the device's
    state after it, `count` the occurrences in the frequency window (None when the code has no
    FaultFrequency rule)."""

    time: float
    device: int
    code: str
    kind: str
    level: Level
    isolation: Isolation
    reason: str
    count: Optional[int] = None


class _Episode:
    """One fault of one code on one device, from its occurrence until it is gone."""

    __slots__ = ("code", "started", "base", "duration_level", "frequency_level", "active",
                 "timed_out", "generation")

    def __init__(self, code: str, started: float, base: Level):
        self.code = code
        self.started = started
        self.base = base
        self.duration_level: Optional[Level] = None
        self.frequency_level: Optional[Level] = None
        self.active = True
        self.timed_out = False
        self.generation = 0  # bumped to void a pending "recovered" timer

    @property
    def level(self) -> Level:
        return max(self.base, self.duration_level or Level.NotHandleFault,
                   self.frequency_level or Level.NotHandleFault)


class _Sticky:
    """A ManuallySeparateNPU isolation of a device caused by one code."""

    __slots__ = ("code", "release_time_window", "generation")

    def __init__(self, code: str, release_time_window: Optional[int]):
        self.code = code
        self.release_time_window = release_time_window
        self.generation = 0  # bumped to void a pending release


class PolicyEngine:
    """Stateful escalation for all devices of a job. Not thread-safe: feed it from one thread."""

    def __init__(self, config: PolicyConfig):
        self.config = config
        self.now = -math.inf
        self._episodes: Dict[int, Dict[str, _Episode]] = {}
        self._windows: Dict[int, Dict[str, Deque[float]]] = {}
        self._sticky: Dict[int, Dict[str, _Sticky]] = {}
        self._timers: list = []
        self._order = itertools.count()  # keeps heap entries of equal time in arming order

    # ---- feeding --------------------------------------------------------------------------------

    def handle(self, event: FaultEvent) -> List[Decision]:
        """The decisions `event` brings about: first those of timers that fell due up to its time
        (timeouts, final recoveries, releases), then the event's own, always last."""
        if event.code and event.code != normalize_code(event.code):
            event = replace(event, code=normalize_code(event.code))
        decisions = self.advance(event.time)
        if event.kind == OCCUR:
            decisions.append(self._occur(event))
        elif event.kind == RECOVER:
            decisions.append(self._recover(event))
        elif event.kind == CLEAR:
            decisions.append(self._clear(event.device, event.time))
        else:
            raise ValueError(f"unknown event kind {event.kind!r}")
        return decisions

    def advance(self, now: float) -> List[Decision]:
        """Move time to `now`, returning the decisions of the timers that fell due."""
        if now < self.now:
            raise ValueError(f"time {seconds(now)} is before the engine's current time "
                             f"{seconds(self.now)}; events must come in time order")
        decisions = []
        while self._timers and self._timers[0][0] <= now:
            due, _, action, device, code, owner, generation = heapq.heappop(self._timers)
            self.now = due
            decision = action(self, due, device, code, owner, generation)
            if decision is not None:
                decisions.append(decision)
        self.now = now
        return decisions

    def clear(self, device: int, now: float) -> List[Decision]:
        """An operator returns `device` to service: its sticky isolation ends and its frequency
        counts restart. Faults still present keep their own level. Same as a CLEAR event."""
        return self.handle(FaultEvent(now, device, CLEAR))

    def _clear(self, device: int, now: float) -> Decision:
        dropped = sorted(self._sticky.pop(device, {}))
        self._windows.pop(device, None)
        for episode in self._episodes.get(device, {}).values():
            episode.frequency_level = None
        reason = (f"operator cleared the sticky isolation from {', '.join(dropped)}; frequency counts "
                  f"restarted" if dropped else "operator clear: nothing sticky; frequency counts restarted")
        return self._decision(now, device, "", CLEAR, Level.NotHandleFault, reason)

    # ---- queries --------------------------------------------------------------------------------

    def isolation(self, device: int) -> Isolation:
        if self._sticky.get(device):
            return Isolation.MANUALLY_SEPARATED
        return isolation_of_level(self._device_level(device))

    def isolated_devices(self) -> Dict[int, Isolation]:
        """Every device whose isolation is not NONE."""
        devices = set(self._sticky) | set(self._episodes)
        states = {device: self.isolation(device) for device in devices}
        return {device: state for device, state in sorted(states.items()) if state is not Isolation.NONE}

    def level(self, device: int, code: str) -> Level:
        """The handling in force for `code` on `device` now."""
        episode = self._episodes.get(device, {}).get(code)
        return episode.level if episode else Level.NotHandleFault

    def frequency_count(self, device: int, code: str) -> int:
        """Occurrences of `code` on `device` still inside its rule's window at the current time."""
        rule = self.config.frequency_rule(code)
        window = self._windows.get(device, {}).get(code)
        if rule is None or not window:
            return 0
        self._expire(window, rule, self.now)
        return len(window)

    # ---- events ---------------------------------------------------------------------------------

    def _occur(self, event: FaultEvent) -> Decision:
        time, device, code = event.time, event.device, event.code
        frequency = self.config.frequency_rule(code)
        duration = self.config.duration_rule(code)
        episode, new, reasons = self._episode_for(event)
        self._void_release(device, code)
        count = None
        if frequency and not duration:
            count = self._count(device, frequency, time)
            reasons.append(self._frequency_reason(device, episode, frequency, count))
        if duration:
            reasons.append(self._check_timeout(device, episode, duration, frequency, time, new))
            count = self._window_size(device, frequency, time)
        return self._decision(time, device, code, OCCUR, episode.level, "; ".join(filter(None, reasons)),
                              count)

    def _episode_for(self, event: FaultEvent):
        """The fault this occurrence belongs to, whether it is new (not resumed or repeated), and
        what is said of it."""
        episodes = self._episodes.setdefault(event.device, {})
        episode = episodes.get(event.code)
        if episode is None:
            episode = _Episode(event.code, event.time, self.config.level_of(event.code, event.severity))
            episodes[event.code] = episode
            return episode, True, [self._base_reason(event, episode.base)]
        if not episode.active:
            episode.active = True
            episode.generation += 1
            return episode, False, [f"back within RecoverTimeout: same fault since "
                                     f"t={seconds(episode.started)}"]
        return episode, False, [f"still active since t={seconds(episode.started)}"]

    def _base_reason(self, event: FaultEvent, base: Level) -> str:
        if event.code in self.config.levels:
            return f"level {base.name}"
        return f"unknown code, severity {event.severity or 'not reported'} -> {base.name}"

    def _frequency_reason(self, device: int, episode: _Episode, rule: FrequencyRule,
                          count: int) -> str:
        if count < rule.times:
            return f"{count}/{rule.times} in {rule.time_window} s"
        return f"{count}/{rule.times} in {rule.time_window} s -> {self._escalate(device, episode, rule)}"

    def _check_timeout(self, device: int, episode: _Episode, rule: DurationRule,
                       frequency: Optional[FrequencyRule], time: float, new: bool) -> str:
        if episode.timed_out:
            return ""
        due = episode.started + rule.fault_timeout
        if due <= time:
            return self._time_out(device, episode, rule, frequency, time)
        if new:
            self._arm(due, PolicyEngine._on_timeout, device, episode.code, episode, 0)
        return f"times out at t={seconds(due)} unless it recovers"

    def _recover(self, event: FaultEvent) -> Decision:
        time, device, code = event.time, event.device, event.code
        episodes = self._episodes.get(device, {})
        episode = episodes.get(code)
        if episode is None or not episode.active:
            reason = ("no active fault of this code; nothing to do" if episode is None
                      else "already recovering")
            level = episode.level if episode else Level.NotHandleFault
            return self._decision(time, device, code, RECOVER, level, reason)
        episode.active = False
        self._arm_release(device, code, time)
        rule = self.config.duration_rule(code)
        frequency = self.config.frequency_rule(code)
        if rule and rule.recover_timeout > 0:
            episode.generation += 1
            self._arm(time + rule.recover_timeout, PolicyEngine._on_recovered, device, code, episode,
                      episode.generation)
            return self._decision(time, device, code, RECOVER, episode.level,
                                  f"recovered; {episode.level.name} holds until it stays away "
                                  f"{rule.recover_timeout} s", self._window_size(device, frequency, time))
        del episodes[code]
        return self._decision(time, device, code, RECOVER, Level.NotHandleFault, "recovered",
                              self._window_size(device, frequency, time))

    # ---- escalation -----------------------------------------------------------------------------

    def _time_out(self, device: int, episode: _Episode, rule: DurationRule,
                  frequency: Optional[FrequencyRule], time: float) -> str:
        episode.timed_out = True
        episode.duration_level = rule.handling
        if rule.handling == Level.ManuallySeparateNPU:
            self._make_sticky(device, episode.code, None)
        reason = (f"lasted {seconds(time - episode.started)} s >= FaultTimeout {rule.fault_timeout} s "
                  f"-> {rule.handling.name}")
        if frequency is None:
            return reason
        count = self._count(device, frequency, time)
        return f"{reason}; timed-out {self._frequency_reason(device, episode, frequency, count)}"

    def _escalate(self, device: int, episode: _Episode, rule: FrequencyRule) -> str:
        episode.frequency_level = rule.handling
        if rule.handling == Level.ManuallySeparateNPU:
            self._make_sticky(device, episode.code, rule.release_time_window)
        return rule.handling.name

    def _make_sticky(self, device: int, code: str, release_time_window: Optional[int]) -> None:
        self._sticky.setdefault(device, {}).setdefault(code, _Sticky(code, release_time_window))

    # ---- frequency windows ----------------------------------------------------------------------

    def _count(self, device: int, rule: FrequencyRule, time: float) -> int:
        window = self._windows.setdefault(device, {}).setdefault(rule.code, deque())
        window.append(time)
        self._expire(window, rule, time)
        return len(window)

    def _window_size(self, device: int, rule: Optional[FrequencyRule], time: float) -> Optional[int]:
        if rule is None:
            return None
        window = self._windows.get(device, {}).get(rule.code)
        if not window:
            return 0
        self._expire(window, rule, time)
        return len(window)

    @staticmethod
    def _expire(window: Deque[float], rule: FrequencyRule, time: float) -> None:
        horizon = time - rule.time_window
        while window and window[0] <= horizon:
            window.popleft()

    # ---- timers ---------------------------------------------------------------------------------

    def _arm(self, due: float, action, device: int, code: str, owner, generation: int) -> None:
        heapq.heappush(self._timers, (due, next(self._order), action, device, code, owner, generation))

    def _arm_release(self, device: int, code: str, time: float) -> None:
        sticky = self._sticky.get(device, {}).get(code)
        if sticky is None or sticky.release_time_window is None:
            return
        sticky.generation += 1
        self._arm(time + sticky.release_time_window, PolicyEngine._on_release, device, code, sticky,
                  sticky.generation)

    def _void_release(self, device: int, code: str) -> None:
        sticky = self._sticky.get(device, {}).get(code)
        if sticky is not None:
            sticky.generation += 1

    def _on_timeout(self, due, device, code, episode, _generation) -> Optional[Decision]:
        if self._episodes.get(device, {}).get(code) is not episode or not episode.active \
                or episode.timed_out:
            return None
        frequency = self.config.frequency_rule(code)
        reason = self._time_out(device, episode, self.config.duration_rule(code), frequency, due)
        return self._decision(due, device, code, TIMEOUT, episode.level, reason,
                              self._window_size(device, frequency, due))

    def _on_recovered(self, due, device, code, episode, generation) -> Optional[Decision]:
        episodes = self._episodes.get(device, {})
        if episodes.get(code) is not episode or episode.active or episode.generation != generation:
            return None
        del episodes[code]
        return self._decision(due, device, code, RECOVERED, Level.NotHandleFault,
                              f"stayed away RecoverTimeout; {episode.level.name} lifted")

    def _on_release(self, due, device, code, sticky, generation) -> Optional[Decision]:
        stickies = self._sticky.get(device, {})
        if stickies.get(code) is not sticky or sticky.generation != generation:
            return None
        del stickies[code]
        if not stickies:
            del self._sticky[device]
        self._windows.get(device, {}).pop(code, None)
        episode = self._episodes.get(device, {}).get(code)
        if episode is not None:
            episode.frequency_level = None
        return self._decision(due, device, code, RELEASE, self.level(device, code),
                              f"absent for ReleaseTimeWindow {sticky.release_time_window} s; "
                              f"isolation released, count restarted")

    # ---- helpers --------------------------------------------------------------------------------

    def _device_level(self, device: int) -> Level:
        return most_severe(episode.level for episode in self._episodes.get(device, {}).values())

    def _decision(self, time: float, device: int, code: str, kind: str, level: Level, reason: str,
                  count: Optional[int] = None) -> Decision:
        return Decision(time, device, code, kind, level, self.isolation(device), reason, count)
