"""Replaying a 100k-event log: every count and escalation checked against a brute-force oracle."""
import bisect
import random
from collections import defaultdict

from mindio_adaptor.core.policy.config import customization_from, fault_codes_from
from mindio_adaptor.core.policy.engine import Isolation, PolicyEngine
from mindio_adaptor.core.policy.events import FaultEvent
from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.rules import PolicyConfig

DEVICES = 400
REPEATED = "80E0A000"  # frequency only: 3 in 600 s -> SeparateNPU (not sticky)
STICKY = "80E0B000"  # frequency only: 2 in 86400 s -> ManuallySeparateNPU
LINK = "81078603"  # both rules: faults lasting 20 s count, 5 in 86400 s -> ManuallySeparateNPU

CODES = {"RestartRequestCodes": [REPEATED], "RestartBusinessCodes": [STICKY], "NotHandleFaultCodes": [LINK]}
CUSTOM = {
    "FaultFrequency": [
        {"EventId": [REPEATED], "TimeWindow": 600, "Times": 3, "FaultHandling": "SeparateNPU"},
        {"EventId": [STICKY], "TimeWindow": 86400, "Times": 2, "FaultHandling": "ManuallySeparateNPU"},
        {"EventId": [LINK], "TimeWindow": 86400, "Times": 5, "FaultHandling": "ManuallySeparateNPU"}],
    "FaultDuration": [
        {"EventId": [LINK], "FaultTimeout": 20, "RecoverTimeout": 0, "FaultHandling": "PreSeparateNPU"}],
}


def generate(count, seed=7):
    """`count` events, time-sorted: REPEATED and STICKY faults recovered a second later, LINK
    faults of 5 s or 30 s that never overlap on one device. Returns (events, long LINK faults)."""
    rng = random.Random(seed)
    events, long_links, link_free_at = [], [], defaultdict(float)
    clock = 0.0
    while len(events) < count:
        clock += rng.choice((0.5, 1.0, 2.0))
        device = rng.randrange(DEVICES)
        pick = rng.random()
        if pick < 0.6:
            code, length = REPEATED, 1.0
        elif pick < 0.65:
            code, length = STICKY, 1.0
        elif clock >= link_free_at[device]:
            code, length = LINK, rng.choice((5.0, 30.0))
            link_free_at[device] = clock + length + 1
            if length >= 20:
                long_links.append((device, clock + 20))
        else:
            continue
        events.append(FaultEvent(clock, device, "occur", code))
        events.append(FaultEvent(clock + length, device, "recover", code))
    events.sort(key=lambda event: event.time)  # stable: an occur stays before its own recover
    return events[:count], long_links


def in_window(times, now, window):
    """How many of the sorted `times` are in (now - window, now]."""
    return bisect.bisect_right(times, now) - bisect.bisect_right(times, now - window)


def oracle_sticky_devices(events, long_links):
    occurs = defaultdict(list)
    for event in events:
        if event.kind == "occur" and event.code == STICKY:
            occurs[event.device].append(event.time)
    sticky = {d for d, times in occurs.items() if any(in_window(times, t, 86400) >= 2 for t in times)}
    timed_out = defaultdict(list)
    for device, time in long_links:
        timed_out[device].append(time)
    sticky |= {d for d, times in timed_out.items() if any(in_window(times, t, 86400) >= 5 for t in times)}
    return sticky


def test_replay_100k_events_counts_match_the_oracle():
    events, long_links = generate(100_000)
    codes, _ = fault_codes_from(CODES, "codes.json")
    custom, issues = customization_from(CUSTOM, "custom.json")
    assert issues == []
    engine = PolicyEngine(PolicyConfig(codes, custom))
    repeated_times = defaultdict(list)
    timeouts, decided = [], 0
    for event in events:
        decisions = engine.handle(event)
        decided += len(decisions)
        own = decisions[-1]
        timeouts += [d for d in decisions if d.kind == "timeout"]
        if event.kind == "occur" and event.code == REPEATED:
            times = repeated_times[event.device]
            times.append(event.time)
            expected = in_window(times, event.time, 600)
            assert own.count == expected
            assert own.level is (Level.SeparateNPU if expected >= 3 else Level.RestartRequest)
    timeouts += engine.advance(events[-1].time + 100)
    timeouts = [d for d in timeouts if d.kind == "timeout"]

    long_before_end = [(d, t) for d, t in long_links if t <= events[-1].time + 100]
    assert len(timeouts) == len(long_before_end)
    link_times = defaultdict(list)
    for decision in timeouts:
        link_times[decision.device].append(decision.time)
        assert decision.count == in_window(link_times[decision.device], decision.time, 86400)
    expected_sticky = oracle_sticky_devices(events, long_before_end)
    assert expected_sticky  # the log is dense enough to isolate some devices
    isolated = engine.isolated_devices()
    assert {d for d, s in isolated.items() if s is Isolation.MANUALLY_SEPARATED} == expected_sticky
    assert decided >= len(events)
