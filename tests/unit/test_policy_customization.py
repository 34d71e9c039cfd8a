"""faultCustomization.json: ranges (min, max, one past each side), defaults, malformed sections,
first-valid-rule-per-EventId, and the 81078603 network fault's defaults and restricted handlings."""
import pytest

from mindio_adaptor.core.policy.config import customization_from, read_customization
from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.rules import GraceTolerance, PolicyFileError

SOURCE = "custom.json"


def parse(document):
    return customization_from(document, SOURCE)


def items(issues):
    return [issue.item for issue in issues]


def frequency(**fields):
    rule = {"EventId": ["80E18005"], "TimeWindow": 86400, "Times": 3,
            "FaultHandling": "ManuallySeparateNPU"}
    rule.update(fields)
    return {k: v for k, v in rule.items() if v is not MISSING}


def duration(**fields):
    rule = {"EventId": ["80E18005"], "FaultTimeout": 20, "RecoverTimeout": 60,
            "FaultHandling": "SeparateNPU"}
    rule.update(fields)
    return {k: v for k, v in rule.items() if v is not MISSING}


MISSING = object()

GRACE_CASES = [
    # key, value, effective, ignored?
    ("WaitProcessReadCMTime", 4, 30, True),
    ("WaitProcessReadCMTime", 5, 5, False),
    ("WaitProcessReadCMTime", 90, 90, False),
    ("WaitProcessReadCMTime", 91, 30, True),
    ("WaitDeviceResetTime", 59, 150, True),
    ("WaitDeviceResetTime", 60, 60, False),
    ("WaitDeviceResetTime", 180, 180, False),
    ("WaitDeviceResetTime", 181, 150, True),
    ("WaitFaultSelfHealingTime", 0, 15, True),
    ("WaitFaultSelfHealingTime", 1, 1, False),
    ("WaitFaultSelfHealingTime", 30, 30, False),
    ("WaitFaultSelfHealingTime", 31, 15, True),
    ("WaitFaultSelfHealingTime", "20", 15, True),
    ("WaitFaultSelfHealingTime", 20.5, 15, True),
    ("WaitFaultSelfHealingTime", True, 15, True),
    ("WaitFaultSelfHealingTime", None, 15, True),
]
GRACE_ATTRS = {"WaitProcessReadCMTime": "wait_process_read_cm_time",
               "WaitDeviceResetTime": "wait_device_reset_time",
               "WaitFaultSelfHealingTime": "wait_fault_self_healing_time"}


@pytest.mark.parametrize("key, value, effective, ignored", GRACE_CASES)
def test_grace_tolerance_ranges(key, value, effective, ignored):
    custom, issues = parse({"GraceTolerance": {key: value}})
    assert getattr(custom.grace, GRACE_ATTRS[key]) == effective
    assert items(issues) == ([f"GraceTolerance.{key}"] if ignored else [])


def test_grace_tolerance_missing_keys_take_defaults_silently():
    custom, issues = parse({"GraceTolerance": {}})
    assert custom.grace == GraceTolerance(30, 150, 15)
    assert issues == []


FREQUENCY_CASES = [
    # fields, kept?, bad item
    (dict(TimeWindow=59), False, "FaultFrequency[0].TimeWindow"),
    (dict(TimeWindow=60), True, None),
    (dict(TimeWindow=864000), True, None),
    (dict(TimeWindow=864001), False, "FaultFrequency[0].TimeWindow"),
    (dict(TimeWindow=MISSING), False, "FaultFrequency[0].TimeWindow"),
    (dict(TimeWindow="86400"), False, "FaultFrequency[0].TimeWindow"),
    (dict(Times=0), False, "FaultFrequency[0].Times"),
    (dict(Times=1), True, None),
    (dict(Times=100), True, None),
    (dict(Times=101), False, "FaultFrequency[0].Times"),
    (dict(Times=MISSING), False, "FaultFrequency[0].Times"),
    (dict(ReleaseTimeWindow=59), False, "FaultFrequency[0].ReleaseTimeWindow"),
    (dict(ReleaseTimeWindow=60), True, None),
    (dict(ReleaseTimeWindow=864000), True, None),
    (dict(ReleaseTimeWindow=864001), False, "FaultFrequency[0].ReleaseTimeWindow"),
    (dict(FaultHandling="Reboot"), False, "FaultFrequency[0].FaultHandling"),
    (dict(FaultHandling="separatenpu"), False, "FaultFrequency[0].FaultHandling"),
    (dict(FaultHandling=MISSING), False, "FaultFrequency[0].FaultHandling"),
    (dict(EventId=[]), False, "FaultFrequency[0].EventId"),
    (dict(EventId="80E18005"), False, "FaultFrequency[0].EventId"),
    (dict(EventId=MISSING), False, "FaultFrequency[0].EventId"),
]


@pytest.mark.parametrize("fields, kept, bad_item", FREQUENCY_CASES)
def test_frequency_rule_ranges(fields, kept, bad_item):
    custom, issues = parse({"FaultFrequency": [frequency(**fields)]})
    assert ("80E18005" in custom.frequency) is kept
    assert items(issues) == ([] if kept else [bad_item])
    if not kept:
        assert "rule ignored" in issues[0].problem


@pytest.mark.parametrize("level", list(Level))
def test_frequency_rule_accepts_every_level(level):
    custom, issues = parse({"FaultFrequency": [frequency(FaultHandling=level.name)]})
    assert custom.frequency["80E18005"].handling is level and issues == []


def test_frequency_rule_effective_values():
    custom, _ = parse({"FaultFrequency": [frequency(EventId=["80e18005 "], ReleaseTimeWindow=7200)]})
    rule = custom.frequency["80E18005"]
    assert (rule.time_window, rule.times, rule.handling, rule.release_time_window, rule.origin) == \
        (86400, 3, Level.ManuallySeparateNPU, 7200, "FaultFrequency[0]")


def test_bad_event_id_entries_are_dropped_one_by_one():
    custom, issues = parse({"FaultFrequency": [frequency(EventId=["80E18005", 7, ""])]})
    assert list(custom.frequency) == ["80E18005"]
    assert items(issues) == ["FaultFrequency[0].EventId[1]", "FaultFrequency[0].EventId[2]"]


DURATION_CASES = [
    # fields, (fault_timeout, recover_timeout) or None when ignored, bad item
    (dict(FaultTimeout=-1), None, "FaultDuration[0].FaultTimeout"),
    (dict(FaultTimeout=0), (0, 60), None),
    (dict(FaultTimeout=600), (600, 60), None),
    (dict(FaultTimeout=601), None, "FaultDuration[0].FaultTimeout"),
    (dict(RecoverTimeout=-1), None, "FaultDuration[0].RecoverTimeout"),
    (dict(RecoverTimeout=0), (20, 0), None),
    (dict(RecoverTimeout=86400), (20, 86400), None),
    (dict(RecoverTimeout=86401), None, "FaultDuration[0].RecoverTimeout"),
    (dict(FaultTimeout=MISSING, RecoverTimeout=MISSING), (0, 0), None),
    (dict(FaultTimeout="20"), (0, 60), "FaultDuration[0].FaultTimeout"),
    (dict(RecoverTimeout=None), (20, 0), "FaultDuration[0].RecoverTimeout"),
    (dict(FaultHandling="Bogus"), None, "FaultDuration[0].FaultHandling"),
    (dict(FaultHandling=MISSING), None, "FaultDuration[0].FaultHandling"),
]


@pytest.mark.parametrize("fields, effective, bad_item", DURATION_CASES)
def test_duration_rule_ranges_and_defaults(fields, effective, bad_item):
    custom, issues = parse({"FaultDuration": [duration(**fields)]})
    rule = custom.duration.get("80E18005")
    assert (rule and (rule.fault_timeout, rule.recover_timeout)) == (effective or None)
    assert items(issues) == ([bad_item] if bad_item else [])


NETWORK_CASES = [
    # FaultHandling given for 81078603, effective handling, ignored/replaced?
    ("NotHandleFault", Level.NotHandleFault, False),
    ("PreSeparateNPU", Level.PreSeparateNPU, False),
    ("SeparateNPU", Level.SeparateNPU, False),
    ("RestartNPU", Level.NotHandleFault, True),
    ("RestartBusiness", Level.NotHandleFault, True),
    ("ManuallySeparateNPU", Level.NotHandleFault, True),
    ("SubHealthFault", Level.NotHandleFault, True),
    ("Bogus", Level.NotHandleFault, True),
    (MISSING, Level.NotHandleFault, True),
]


@pytest.mark.parametrize("handling, effective, replaced", NETWORK_CASES)
def test_network_fault_restricted_handlings(handling, effective, replaced):
    custom, issues = parse({"FaultDuration": [duration(EventId=["81078603"], FaultHandling=handling)]})
    assert custom.duration["81078603"].handling is effective
    assert items(issues) == (["FaultDuration[0].FaultHandling"] if replaced else [])


def test_network_fault_default_durations():
    custom, issues = parse({"FaultDuration": [
        {"EventId": ["81078603", "80E18005"], "FaultHandling": "PreSeparateNPU"}]})
    network, other = custom.duration["81078603"], custom.duration["80E18005"]
    assert (network.fault_timeout, network.recover_timeout) == (20, 60)
    assert (other.fault_timeout, other.recover_timeout) == (0, 0)
    assert issues == []


def test_network_restriction_applies_only_to_the_network_code_of_a_shared_rule():
    custom, issues = parse({"FaultDuration": [duration(EventId=["81078603", "80E18005"],
                                                       FaultHandling="RestartNPU")]})
    assert custom.duration["81078603"].handling is Level.NotHandleFault
    assert custom.duration["80E18005"].handling is Level.RestartNPU
    assert len(issues) == 1 and "81078603" in issues[0].problem


def test_network_restriction_does_not_apply_to_frequency_rules():
    custom, issues = parse({"FaultFrequency": [frequency(EventId=["81078603"])]})
    assert custom.frequency["81078603"].handling is Level.ManuallySeparateNPU and issues == []


DUPLICATE_CASES = [
    # rules for 80E18005 in file order, Times of the rule that counts, issue items
    ([frequency(Times=3), frequency(Times=5)], 3, ["FaultFrequency[1].EventId"]),
    ([frequency(Times=0), frequency(Times=5)], 5, ["FaultFrequency[0].Times"]),
    ([frequency(Times=0), frequency(Times=101), frequency(Times=7), frequency(Times=9)], 7,
     ["FaultFrequency[0].Times", "FaultFrequency[1].Times", "FaultFrequency[3].EventId"]),
    ([frequency(EventId=["80E18005", "80E18005"], Times=4)], 4, ["FaultFrequency[0].EventId"]),
]


@pytest.mark.parametrize("rules, times, issue_items", DUPLICATE_CASES)
def test_only_first_valid_frequency_rule_per_event_id_counts(rules, times, issue_items):
    custom, issues = parse({"FaultFrequency": rules})
    assert custom.frequency["80E18005"].times == times
    assert items(issues) == issue_items


def test_first_valid_duration_rule_counts_and_other_codes_of_the_later_rule_stay():
    custom, issues = parse({"FaultDuration": [
        duration(FaultTimeout=5),
        duration(EventId=["80E18005", "80E01801"], FaultTimeout=9)]})
    assert custom.duration["80E18005"].fault_timeout == 5
    assert custom.duration["80E01801"].fault_timeout == 9
    assert items(issues) == ["FaultDuration[1].EventId"]


MALFORMED_SECTIONS = [
    ({"GraceTolerance": [30]}, "GraceTolerance"),
    ({"FaultFrequency": {"EventId": ["80E18005"]}}, "FaultFrequency"),
    ({"FaultDuration": "81078603"}, "FaultDuration"),
]


@pytest.mark.parametrize("document, section", MALFORMED_SECTIONS)
def test_malformed_section_falls_back_to_the_shipped_section(document, section):
    shipped, _ = read_customization()
    custom, issues = parse(document)
    attr = {"GraceTolerance": "grace", "FaultFrequency": "frequency", "FaultDuration": "duration"}[section]
    assert getattr(custom, attr) == getattr(shipped, attr)
    assert items(issues) == [section] and "default" in issues[0].problem


def test_absent_sections_mean_no_rules():
    custom, issues = parse({})
    assert (custom.frequency, custom.duration, custom.grace, issues) == ({}, {}, GraceTolerance(), [])


def test_rule_that_is_not_an_object_is_ignored():
    custom, issues = parse({"FaultFrequency": ["80E18005", frequency()], "FaultDuration": [3]})
    assert list(custom.frequency) == ["80E18005"]
    assert items(issues) == ["FaultFrequency[0]", "FaultDuration[0]"]


def test_unknown_sections_and_keys_are_reported_and_ignored():
    custom, issues = parse({"Extra": 1, "GraceTolerance": {"Nap": 3},
                            "FaultFrequency": [frequency(Comment="x")]})
    assert "80E18005" in custom.frequency
    assert items(issues) == ["Extra", "GraceTolerance.Nap", "FaultFrequency[0].Comment"]


@pytest.mark.parametrize("document", [[], "text", 3, None])
def test_top_level_must_be_an_object(document):
    with pytest.raises(PolicyFileError, match=SOURCE):
        parse(document)


def test_issue_names_file_item_and_problem():
    _, issues = parse({"FaultFrequency": [frequency(Times=101)]})
    assert str(issues[0]) == "custom.json: FaultFrequency[0].Times: 101 is outside 1..100; rule ignored"
