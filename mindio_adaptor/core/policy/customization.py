"""faultCustomization.json: grace times, and the frequency and duration escalation rules.

Validation follows the reference: a value outside its range makes its item ignored, a section of
the wrong shape falls back to the shipped default section, and for each EventId only the first valid
rule counts. Every ignored item is returned as a `ConfigIssue` naming it and saying why.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from mindio_adaptor.core.policy.levels import Level, parse_level
from mindio_adaptor.core.policy.rules import (DEFAULT_DURATION, FAULT_TIMEOUT_RANGE, GRACE_TOLERANCE_RANGES,
                                              NETWORK_FAULT_CODE, NETWORK_FAULT_DEFAULT_DURATION,
                                              NETWORK_FAULT_HANDLINGS, RECOVER_TIMEOUT_RANGE, RELEASE_TIME_WINDOW_RANGE,
                                              TIME_WINDOW_RANGE, TIMES_RANGE, ConfigIssue, Customization, DurationRule,
                                              FrequencyRule, GraceTolerance, PolicyFileError, json_kind, normalize_code)

SECTIONS = ("GraceTolerance", "FaultFrequency", "FaultDuration")
FREQUENCY_KEYS = ("EventId", "TimeWindow", "Times", "FaultHandling", "ReleaseTimeWindow")
DURATION_KEYS = ("EventId", "FaultTimeout", "RecoverTimeout", "FaultHandling")


class _Issues:
    """Collects the ignored items of one file."""

    def __init__(self, source: str):
        self.source = source
        self.items: List[ConfigIssue] = []

    def add(self, item: str, problem: str) -> None:
        self.items.append(ConfigIssue(self.source, item, problem))


def parse_customization(document: object, source: str, defaults: Mapping[str, object]
                        ) -> Tuple[Customization, List[ConfigIssue]]:
    """The effective content of a faultCustomization.json document. `defaults` is the shipped
    document, whose sections replace malformed ones."""
    if not isinstance(document, dict):
        raise PolicyFileError(source, f"expected a JSON object with {', '.join(SECTIONS)}, "
                              f"got {json_kind(document)}")
    issues = _Issues(source)
    for key in document:
        if key not in SECTIONS:
            issues.add(key, f"unknown section (expected {', '.join(SECTIONS)}); ignored")
    grace = _grace(_section(document, "GraceTolerance", dict, defaults, issues), issues)
    frequency = _frequency_rules(_section(document, "FaultFrequency", list, defaults, issues), issues)
    duration = _duration_rules(_section(document, "FaultDuration", list, defaults, issues), issues)
    return Customization(grace, frequency, duration), issues.items


def _section(document: Mapping[str, object], name: str, shape: type,
             defaults: Mapping[str, object], issues: _Issues):
    """The section `name`; an absent one is empty, a malformed one is replaced by the default's."""
    value = document.get(name, shape())
    if isinstance(value, shape):
        return value
    issues.add(name, f"expected {json_kind(shape())}, got {json_kind(value)}; "
               f"the default {name} section is used instead")
    return defaults.get(name, shape())


def _whole_seconds(value: object) -> bool:
    # bool is an int in Python but never a duration in JSON.
    return isinstance(value, int) and not isinstance(value, bool)


def _out_of_range(value: int, bounds: Tuple[int, int]) -> Optional[str]:
    low, high = bounds
    if low <= value <= high:
        return None
    return f"{value} is outside {low}..{high}"


def _grace(section: Mapping[str, object], issues: _Issues) -> GraceTolerance:
    values = {}
    for name, (low, high, default) in GRACE_TOLERANCE_RANGES.items():
        values[name] = default
        if name not in section:
            continue
        raw = section[name]
        if not _whole_seconds(raw):
            issues.add(f"GraceTolerance.{name}", f"expected whole seconds, got {json_kind(raw)}; "
                       f"default {default} used")
        elif _out_of_range(raw, (low, high)):
            issues.add(f"GraceTolerance.{name}", f"{_out_of_range(raw, (low, high))}; ignored, "
                       f"default {default} used")
        else:
            values[name] = raw
    for name in section:
        if name not in GRACE_TOLERANCE_RANGES:
            issues.add(f"GraceTolerance.{name}", "unknown key; ignored")
    return GraceTolerance(values["WaitProcessReadCMTime"], values["WaitDeviceResetTime"],
                          values["WaitFaultSelfHealingTime"])


def _event_ids(rule: Mapping[str, object], origin: str, issues: _Issues) -> List[str]:
    """The rule's codes, normalised; bad entries are dropped one by one."""
    raw = rule.get("EventId")
    if not isinstance(raw, list) or not raw:
        issues.add(f"{origin}.EventId", f"expected a non-empty list of code strings, got "
                   f"{json_kind(raw)}; rule ignored")
        return []
    codes = []
    for index, entry in enumerate(raw):
        if isinstance(entry, str) and entry.strip():
            codes.append(normalize_code(entry))
        else:
            issues.add(f"{origin}.EventId[{index}]", f"expected a code string, got "
                       f"{json_kind(entry)}; ignored")
    return codes


def _unknown_keys(rule: Mapping[str, object], known: Sequence[str], origin: str,
                  issues: _Issues) -> None:
    for key in rule:
        if key not in known:
            issues.add(f"{origin}.{key}", "unknown key; ignored")


def _required_int(rule: Mapping[str, object], key: str, bounds: Tuple[int, int], origin: str,
                  issues: _Issues) -> Optional[int]:
    """The value of a field without a default: None (and an issue) when it is missing or bad."""
    raw = rule.get(key)
    problem = None
    if key not in rule:
        problem = "missing"
    elif not _whole_seconds(raw):
        problem = f"expected a whole number, got {json_kind(raw)}"
    else:
        problem = _out_of_range(raw, bounds)
    if problem:
        issues.add(f"{origin}.{key}", f"{problem}; rule ignored")
        return None
    return raw


def _handling(rule: Mapping[str, object], origin: str, issues: _Issues,
              consequence: str = "rule ignored") -> Optional[Level]:
    raw = rule.get("FaultHandling")
    level = parse_level(raw)
    if level is None:
        what = (f"{json_kind(raw)} is not a level (expected one of "
                f"{', '.join(member.name for member in Level)})" if "FaultHandling" in rule
                else "missing")
        issues.add(f"{origin}.FaultHandling", f"{what}; {consequence}")
    return level


def _frequency_rules(section: Sequence[object], issues: _Issues) -> Dict[str, FrequencyRule]:
    rules: Dict[str, FrequencyRule] = {}
    for index, rule in enumerate(section):
        origin = f"FaultFrequency[{index}]"
        if not isinstance(rule, dict):
            issues.add(origin, f"expected an object, got {json_kind(rule)}; rule ignored")
            continue
        _unknown_keys(rule, FREQUENCY_KEYS, origin, issues)
        for rule_for_code in _frequency_rule(rule, origin, issues):
            _keep_first(rules, rule_for_code, issues)
    return rules


def _frequency_rule(rule: Mapping[str, object], origin: str, issues: _Issues) -> List[FrequencyRule]:
    codes = _event_ids(rule, origin, issues)
    window = _required_int(rule, "TimeWindow", TIME_WINDOW_RANGE, origin, issues)
    times = _required_int(rule, "Times", TIMES_RANGE, origin, issues)
    handling = _handling(rule, origin, issues)
    release = None
    if "ReleaseTimeWindow" in rule:
        release = _required_int(rule, "ReleaseTimeWindow", RELEASE_TIME_WINDOW_RANGE, origin, issues)
        if release is None:
            return []
    if not codes or window is None or times is None or handling is None:
        return []
    return [FrequencyRule(code, window, times, handling, release, origin) for code in codes]


def _keep_first(rules: Dict[str, object], rule, issues: _Issues) -> None:
    earlier = rules.get(rule.code)
    if earlier is None:
        rules[rule.code] = rule
        return
    issues.add(f"{rule.origin}.EventId", f"{rule.code} already has a valid rule in {earlier.origin}; "
               f"only the first counts, ignored here")


def _duration_rules(section: Sequence[object], issues: _Issues) -> Dict[str, DurationRule]:
    rules: Dict[str, DurationRule] = {}
    for index, rule in enumerate(section):
        origin = f"FaultDuration[{index}]"
        if not isinstance(rule, dict):
            issues.add(origin, f"expected an object, got {json_kind(rule)}; rule ignored")
            continue
        _unknown_keys(rule, DURATION_KEYS, origin, issues)
        for rule_for_code in _duration_rule(rule, origin, issues):
            _keep_first(rules, rule_for_code, issues)
    return rules


def _duration_rule(rule: Mapping[str, object], origin: str, issues: _Issues) -> List[DurationRule]:
    codes = _event_ids(rule, origin, issues)
    fault_timeout = _defaulted_int(rule, "FaultTimeout", FAULT_TIMEOUT_RANGE, origin, issues)
    recover_timeout = _defaulted_int(rule, "RecoverTimeout", RECOVER_TIMEOUT_RANGE, origin, issues)
    if not codes or fault_timeout is False or recover_timeout is False:
        return []
    network = NETWORK_FAULT_CODE in codes
    handling = _handling(rule, origin, issues, "NotHandleFault used for 81078603, rule ignored for "
                         "other codes" if network else "rule ignored")
    rules = []
    for code in codes:
        defaults = NETWORK_FAULT_DEFAULT_DURATION if code == NETWORK_FAULT_CODE else DEFAULT_DURATION
        level = _network_handling(handling, origin, issues) if code == NETWORK_FAULT_CODE else handling
        if level is None:
            continue
        rules.append(DurationRule(code, defaults[0] if fault_timeout is None else fault_timeout,
                                  defaults[1] if recover_timeout is None else recover_timeout,
                                  level, origin))
    return rules


def _defaulted_int(rule: Mapping[str, object], key: str, bounds: Tuple[int, int], origin: str,
                   issues: _Issues):
    """A field with a per-code default: the value, None for "use the default" (absent or
    malformed), or False when it is out of range and the whole rule is ignored."""
    if key not in rule:
        return None
    raw = rule[key]
    if not _whole_seconds(raw):
        issues.add(f"{origin}.{key}", f"expected whole seconds, got {json_kind(raw)}; the default is "
                   f"used ({DEFAULT_DURATION[key == 'RecoverTimeout']}, or "
                   f"{NETWORK_FAULT_DEFAULT_DURATION[key == 'RecoverTimeout']} for {NETWORK_FAULT_CODE})")
        return None
    problem = _out_of_range(raw, bounds)
    if problem:
        issues.add(f"{origin}.{key}", f"{problem}; rule ignored")
        return False
    return raw


def _network_handling(handling: Optional[Level], origin: str, issues: _Issues) -> Level:
    """81078603 is a link fault: escalating it to a chip reset or a re-run cannot help, so the
    reference accepts only these handlings and otherwise does nothing."""
    if handling is None or handling in NETWORK_FAULT_HANDLINGS:
        return handling if handling is not None else Level.NotHandleFault
    issues.add(f"{origin}.FaultHandling", f"{NETWORK_FAULT_CODE} only accepts "
               f"{', '.join(sorted(level.name for level in NETWORK_FAULT_HANDLINGS))}; "
               f"{handling.name} replaced by NotHandleFault for it")
    return Level.NotHandleFault
