"""The policy engine with injected time: base levels, sliding frequency windows, fault durations,
both rules on one code, sticky isolation with operator clear, release windows, and ordering."""
import pytest

from mindio_adaptor.core.policy.config import customization_from, fault_codes_from, read_policy
from mindio_adaptor.core.policy.engine import Isolation, PolicyEngine
from mindio_adaptor.core.policy.events import FaultEvent
from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.rules import PolicyConfig

CODE = "80E18005"
NET = "81078603"
L = Level
I = Isolation


def engine(levels=None, frequency=None, duration=None):
    codes, _ = fault_codes_from(levels or {}, "codes.json")
    document = {"FaultFrequency": frequency or [], "FaultDuration": duration or []}
    custom, issues = customization_from(document, "custom.json")
    assert issues == []
    return PolicyEngine(PolicyConfig(codes, custom))


def freq(times, window=100, handling="ManuallySeparateNPU", code=CODE, **extra):
    return [dict(EventId=[code], TimeWindow=window, Times=times, FaultHandling=handling, **extra)]


def dur(timeout, recover, handling="SeparateNPU", code=CODE):
    return [dict(EventId=[code], FaultTimeout=timeout, RecoverTimeout=recover, FaultHandling=handling)]


def occur(e, t, code=CODE, device=0, severity=None):
    return e.handle(FaultEvent(t, device, "occur", code, severity))


def recover(e, t, code=CODE, device=0):
    return e.handle(FaultEvent(t, device, "recover", code))


def summary(decisions):
    return [(d.time, d.kind, d.level, d.isolation) for d in decisions]


BASE_CASES = [
    # faultCode.json, code, severity, level, isolation while active
    ({"RestartBusinessCodes": ["80E01801"]}, "80E01801", None, L.RestartBusiness, I.NONE),
    ({"PreSeparateNPUCodes": [CODE]}, CODE, None, L.PreSeparateNPU, I.PRE_SEPARATED),
    ({"SeparateNPUCodes": [CODE]}, CODE, "minor", L.SeparateNPU, I.SEPARATED),
    ({}, CODE, "hint", L.NotHandleFault, I.NONE),
    ({}, CODE, "minor", L.NotHandleFault, I.NONE),
    ({}, CODE, "major", L.SeparateNPU, I.SEPARATED),
    ({}, CODE, None, L.SeparateNPU, I.SEPARATED),
]


@pytest.mark.parametrize("levels, code, severity, level, isolation", BASE_CASES)
def test_base_level_and_isolation_follow_the_fault(levels, code, severity, level, isolation):
    e = engine(levels)
    [decision] = occur(e, 0, code, severity=severity)
    assert (decision.level, decision.isolation) == (level, isolation)
    [decision] = recover(e, 5, code)
    assert (decision.level, decision.isolation) == (L.NotHandleFault, I.NONE)


WINDOW_CASES = [
    # occur times (Times=3, TimeWindow=100), counts after each, escalated after each
    ([0, 10, 20], [1, 2, 3], [False, False, True]),
    ([0, 50, 100], [1, 2, 2], [False, False, False]),  # the one at 0 is exactly 100 s old: gone
    ([0, 50, 99.5], [1, 2, 3], [False, False, True]),
    ([0, 150, 160, 170], [1, 1, 2, 3], [False, False, False, True]),
    ([0, 0, 0], [1, 2, 3], [False, False, True]),  # each report counts, even at one instant
]


@pytest.mark.parametrize("times, counts, escalated", WINDOW_CASES)
def test_frequency_sliding_window(times, counts, escalated):
    e = engine({"RestartRequestCodes": [CODE]}, freq(3, handling="RestartNPU"))
    for t, count, up in zip(times, counts, escalated):
        [decision] = occur(e, t)
        recover(e, t)
        assert decision.count == count
        assert decision.level == (L.RestartNPU if up else L.RestartRequest)


def test_frequency_counts_per_device():
    e = engine({}, freq(2, handling="SeparateNPU"))
    assert occur(e, 0, device=1, severity="hint")[-1].level is L.NotHandleFault
    assert occur(e, 1, device=2, severity="hint")[-1].level is L.NotHandleFault
    assert occur(e, 2, device=1, severity="hint")[-1].level is L.SeparateNPU
    assert e.isolated_devices() == {1: I.SEPARATED}


def test_frequency_count_query_expires_with_time():
    e = engine({}, freq(5))
    occur(e, 0, severity="hint")
    occur(e, 60, severity="hint")
    e.advance(100)
    assert e.frequency_count(0, CODE) == 1
    e.advance(160)
    assert e.frequency_count(0, CODE) == 0


def test_duration_timeout_fires_on_its_own_and_holds_for_recover_timeout():
    e = engine({}, duration=dur(20, 60))
    [d] = occur(e, 0, severity="hint")
    assert (d.level, d.isolation) == (L.NotHandleFault, I.NONE)
    assert e.advance(19.9) == []
    assert summary(e.advance(25)) == [(20, "timeout", L.SeparateNPU, I.SEPARATED)]
    assert summary(recover(e, 30)) == [(30, "recover", L.SeparateNPU, I.SEPARATED)]
    assert e.advance(89.9) == []
    assert summary(e.advance(90)) == [(90, "recovered", L.NotHandleFault, I.NONE)]


DURATION_CASES = [
    # FaultTimeout, RecoverTimeout, recover at, decisions up to t=1000
    (20, 60, 19, [(0, "occur", L.NotHandleFault), (19, "recover", L.NotHandleFault),
                  (79, "recovered", L.NotHandleFault)]),
    (20, 60, 20, [(0, "occur", L.NotHandleFault), (20, "timeout", L.SeparateNPU),
                  (20, "recover", L.SeparateNPU), (80, "recovered", L.NotHandleFault)]),
    (20, 0, 30, [(0, "occur", L.NotHandleFault), (20, "timeout", L.SeparateNPU),
                 (30, "recover", L.NotHandleFault)]),
    (0, 0, 30, [(0, "occur", L.SeparateNPU), (30, "recover", L.NotHandleFault)]),
    (600, 86400, 599, [(0, "occur", L.NotHandleFault), (599, "recover", L.NotHandleFault),
                       (599 + 86400, "recovered", L.NotHandleFault)]),
]


@pytest.mark.parametrize("timeout, recover_timeout, recover_at, expected", DURATION_CASES)
def test_duration_boundaries(timeout, recover_timeout, recover_at, expected):
    e = engine({}, duration=dur(timeout, recover_timeout))
    decisions = occur(e, 0, severity="hint") + recover(e, recover_at) + e.advance(100000)
    assert [(d.time, d.kind, d.level) for d in decisions] == expected


def test_flapping_fault_is_one_fault_and_times_out():
    e = engine({}, duration=dur(20, 60))
    occur(e, 0, severity="hint")
    recover(e, 10)
    [d] = occur(e, 15, severity="hint")
    assert "same fault since t=0" in d.reason
    recover(e, 18)
    assert e.advance(25) == []  # away at t=20: no timeout yet
    [back] = occur(e, 30, severity="hint")
    assert (back.level, back.isolation) == (L.SeparateNPU, I.SEPARATED)
    assert "same fault since t=0" in back.reason and "lasted 30 s" in back.reason


def test_flapping_fault_times_out_when_it_is_back_after_the_deadline():
    e = engine({}, duration=dur(20, 60))
    occur(e, 0, severity="hint")
    recover(e, 10)
    [d] = occur(e, 30, severity="hint")
    assert (d.level, d.isolation) == (L.SeparateNPU, I.SEPARATED)
    assert "lasted 30 s >= FaultTimeout 20 s" in d.reason


def test_fault_back_after_recover_timeout_is_a_new_fault():
    e = engine({}, duration=dur(20, 60))
    occur(e, 0, severity="hint")
    recover(e, 10)
    decisions = occur(e, 75, severity="hint")
    assert [d.kind for d in decisions] == ["recovered", "occur"]
    assert decisions[-1].level is L.NotHandleFault
    assert summary(e.advance(95)) == [(95, "timeout", L.SeparateNPU, I.SEPARATED)]


def both(times=2, freq_handling="RestartNPU", dur_handling="PreSeparateNPU", levels=None):
    return engine(levels or {"NotHandleFaultCodes": [CODE]},
                  freq(times, window=10000, handling=freq_handling), dur(20, 0, dur_handling))


def test_with_both_rules_only_timed_out_faults_count():
    e = both(freq_handling="SeparateNPU")
    for start in (0, 100, 200):  # short faults: never counted
        assert occur(e, start)[-1].count == 0
        recover(e, start + 10)
    assert e.frequency_count(0, CODE) == 0
    occur(e, 300)
    assert [(d.kind, d.level, d.count) for d in e.advance(320)] == [("timeout", L.PreSeparateNPU, 1)]
    recover(e, 330)
    occur(e, 400)
    assert [(d.kind, d.level, d.count) for d in e.advance(420)] == [("timeout", L.SeparateNPU, 2)]


MOST_SEVERE_CASES = [
    # own level, frequency handling, duration handling, level after the second timed-out fault
    ("NotHandleFault", "RestartNPU", "PreSeparateNPU", L.PreSeparateNPU),
    ("NotHandleFault", "SeparateNPU", "PreSeparateNPU", L.SeparateNPU),
    ("SeparateNPU", "RestartNPU", "PreSeparateNPU", L.SeparateNPU),
    ("RestartBusiness", "RestartRequest", "RestartNPU", L.RestartNPU),
    ("RestartBusiness", "ManuallySeparateNPU", "PreSeparateNPU", L.ManuallySeparateNPU),
]


@pytest.mark.parametrize("own, freq_handling, dur_handling, level", MOST_SEVERE_CASES)
def test_most_severe_of_level_frequency_and_duration_wins(own, freq_handling, dur_handling, level):
    e = both(freq_handling=freq_handling, dur_handling=dur_handling, levels={f"{own}Codes": [CODE]})
    occur(e, 0)
    recover(e, 30)
    occur(e, 100)
    [timeout] = e.advance(200)
    assert timeout.level is level


def test_manual_separation_is_sticky_until_an_operator_clears_it():
    e = engine({"RestartBusinessCodes": [CODE]}, freq(2))
    occur(e, 0)
    recover(e, 1)
    assert summary(occur(e, 2)) == [(2, "occur", L.ManuallySeparateNPU, I.MANUALLY_SEPARATED)]
    assert summary(recover(e, 3)) == [(3, "recover", L.NotHandleFault, I.MANUALLY_SEPARATED)]
    e.advance(10 ** 9)
    assert e.isolation(0) is I.MANUALLY_SEPARATED
    [cleared] = e.clear(0, 10 ** 9 + 1)
    assert (cleared.kind, cleared.isolation) == ("clear", I.NONE) and CODE in cleared.reason
    assert occur(e, 10 ** 9 + 2)[-1].count == 1  # the count restarted


def test_operator_clear_keeps_a_present_fault_isolated_by_its_own_level():
    e = engine({"SeparateNPUCodes": [CODE]}, freq(1))
    assert occur(e, 0)[-1].isolation is I.MANUALLY_SEPARATED
    [cleared] = e.handle(FaultEvent(5, 0, "clear"))
    assert (cleared.level, cleared.isolation) == (L.NotHandleFault, I.SEPARATED)
    assert recover(e, 6)[-1].isolation is I.NONE


def test_clear_with_nothing_sticky():
    e = engine()
    [cleared] = e.clear(3, 0)
    assert cleared.isolation is I.NONE and "nothing sticky" in cleared.reason


def network_engine():
    return PolicyEngine(read_policy())  # shipped rules: 20 s / 60 s, 5 per 24 h, release 172800 s


def five_long_network_faults(e):
    for k in range(5):
        occur(e, 1000 * k, NET)
        recover(e, 1000 * k + 30, NET)
    return 4000 + 30  # the last recovery


def test_network_fault_defaults_end_to_end():
    e = network_engine()
    [d] = occur(e, 0, NET)
    assert (d.level, d.isolation) == (L.NotHandleFault, I.NONE)
    assert summary(recover(e, 19, NET)) == [(19, "recover", L.NotHandleFault, I.NONE)]
    occur(e, 100, NET)
    assert summary(e.advance(120)) == [(120, "timeout", L.PreSeparateNPU, I.PRE_SEPARATED)]
    recover(e, 130, NET)
    assert summary(e.advance(190)) == [(190, "recovered", L.NotHandleFault, I.NONE)]


def test_release_window_frees_a_frequency_isolation():
    e = network_engine()
    last = five_long_network_faults(e)
    assert e.isolation(0) is I.MANUALLY_SEPARATED
    assert [d.kind for d in e.advance(last + 172799)] == ["recovered"]
    assert e.isolation(0) is I.MANUALLY_SEPARATED
    assert summary(e.advance(last + 172800)) == [(last + 172800, "release", L.NotHandleFault, I.NONE)]
    assert e.frequency_count(0, NET) == 0


def test_a_new_fault_restarts_the_release_window():
    e = network_engine()
    last = five_long_network_faults(e)
    occur(e, last + 1000, NET)
    recover(e, last + 1005, NET)
    assert [d.kind for d in e.advance(last + 172800)] == ["recovered"]
    assert e.isolation(0) is I.MANUALLY_SEPARATED
    assert [d.kind for d in e.advance(last + 1005 + 172800)] == ["release"]


def test_no_release_while_the_fault_is_still_present():
    e = network_engine()
    last = five_long_network_faults(e)
    occur(e, last + 10, NET)
    e.advance(last + 10 ** 7)
    assert e.isolation(0) is I.MANUALLY_SEPARATED


def test_manual_separation_without_release_window_never_releases():
    e = engine({}, freq(1))
    occur(e, 0, severity="hint")
    recover(e, 1)
    assert e.advance(10 ** 9) == []
    assert e.isolation(0) is I.MANUALLY_SEPARATED


def test_duration_escalation_to_manual_separation_is_sticky():
    e = engine({}, duration=dur(5, 0, "ManuallySeparateNPU"))
    occur(e, 0, severity="hint")
    e.advance(5)
    recover(e, 6)
    assert e.isolation(0) is I.MANUALLY_SEPARATED


def test_stray_and_repeated_recover():
    e = engine({}, duration=dur(0, 60))
    assert "nothing to do" in recover(e, 0)[-1].reason
    occur(e, 1, severity="hint")
    recover(e, 2)
    [again] = recover(e, 3)
    assert "already recovering" in again.reason and again.level is L.SeparateNPU


def test_repeated_occur_of_an_active_fault_with_a_duration_rule_is_the_same_fault():
    e = engine({}, freq(2, handling="RestartNPU"), dur(20, 0, "PreSeparateNPU"))
    occur(e, 0, severity="hint")
    [again] = occur(e, 5, severity="hint")
    assert "still active since t=0" in again.reason and again.count == 0
    assert [d.count for d in e.advance(30)] == [1]


def test_time_must_not_go_backwards():
    e = engine()
    occur(e, 10, severity="hint")
    with pytest.raises(ValueError, match="before the engine's current time"):
        occur(e, 9, severity="hint")


def test_timer_decisions_come_before_the_event_in_time_order():
    e = engine({}, duration=dur(10, 0))
    occur(e, 0, severity="hint", device=1)
    occur(e, 5, severity="hint", device=2)
    decisions = occur(e, 100, "80E01801", device=3, severity="hint")
    assert [(d.time, d.device, d.kind) for d in decisions] == \
        [(10, 1, "timeout"), (15, 2, "timeout"), (100, 3, "occur")]


def test_codes_are_matched_whatever_their_case():
    e = engine({"RestartBusinessCodes": ["80E01801"]})
    assert occur(e, 0, " 80e01801")[-1].level is L.RestartBusiness
    assert recover(e, 1, "80e01801")[-1].reason == "recovered"
