"""`mindio-adaptor policy`: check fault-policy files, and explain the decisions on an event log.

    mindio-adaptor policy check faultCode.json faultCustomization.json [--strict]
    mindio-adaptor policy explain --events faults.jsonl [--fault-code F] [--customization F]

Exit codes: 0 fine; 1 a file that cannot be used at all (or, with --strict, any ignored item).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Iterable, List

from mindio_adaptor.core.policy.config import (CUSTOMIZATION_FILE, FAULT_CODE_FILE, customization_from,
                                               fault_codes_from, read_json, read_policy)
from mindio_adaptor.core.policy.customization import SECTIONS
from mindio_adaptor.core.policy.engine import Decision, PolicyEngine
from mindio_adaptor.core.policy.events import EventLogError, read_event_log, seconds
from mindio_adaptor.core.policy.fault_codes import LEVEL_KEYS
from mindio_adaptor.core.policy.rules import ConfigIssue, Customization, PolicyFileError
from mindio_adaptor.core.policy.strategy import DEFAULT_SUB_HEALTHY_STRATEGY, SUB_HEALTHY_STRATEGIES, strategy_for

PROG = "mindio-adaptor policy"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "policy", help="check fault-policy files (faultCode.json, faultCustomization.json) and "
        "explain the handling of a fault event log",
        description="Fault levels and escalation policies, in the formats of the reference's "
        "faultCode.json and faultCustomization.json. See docs/policy.md.")
    actions = parser.add_subparsers(dest="policy_action", metavar="ACTION")
    parser.set_defaults(func=lambda args: _usage(parser))
    _register_check(actions)
    _register_explain(actions)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _register_check(actions) -> None:
    check = actions.add_parser(
        "check", help="validate policy files; print every effective rule and every ignored item",
        description="Validate faultCode.json / faultCustomization.json files (which is which is "
        "told by their sections). Prints each rule with its effective values and each ignored "
        "item with the reason.")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--strict", action="store_true",
                       help="exit 1 when any item was ignored, not only when a file is unusable")
    check.set_defaults(func=run_check)


def _register_explain(actions) -> None:
    explain = actions.add_parser(
        "explain", help="replay a fault event log and print the decision for each event",
        description="Replay a JSON-lines event log, one object a line: "
        '{"time": 12.5, "code": "80E01801", "device": 3, "kind": "occur"} (kind: occur, recover, '
        'or clear for an operator clearing a sticky isolation; optional "severity" for codes '
        "faultCode.json does not list). Times are seconds and must not go backwards.")
    explain.add_argument("--events", required=True, metavar="FILE", help="the event log")
    explain.add_argument("--fault-code", metavar="FILE",
                         help=f"faultCode.json to use (default: the shipped {FAULT_CODE_FILE})")
    explain.add_argument("--customization", metavar="FILE",
                         help=f"faultCustomization.json to use (default: the shipped {CUSTOMIZATION_FILE})")
    explain.add_argument("--until", type=float, metavar="SECONDS",
                         help="after the last event, let time run to SECONDS (timeouts, releases)")
    explain.add_argument("--sub-healthy-strategy", choices=list(SUB_HEALTHY_STRATEGIES),
                         default=DEFAULT_SUB_HEALTHY_STRATEGY,
                         help="the job's subHealthyStrategy, for the strategy column (default: ignore)")
    explain.add_argument("--enabled", default="retry,recover,dump",
                         help="strategies the job enabled, comma-separated like HIGH_AVAILABILITY "
                         "(default: retry,recover,dump)")
    explain.add_argument("--json", action="store_true", help="one JSON object per decision")
    explain.set_defaults(func=run_explain)


# ---- check -------------------------------------------------------------------------------------

def run_check(args) -> int:
    unusable = ignored = 0
    for index, path in enumerate(args.files):
        if index:
            print()
        try:
            issues = _check_file(path)
        except PolicyFileError as error:
            print(f"{PROG} check: {error}", file=sys.stderr)
            unusable += 1
            continue
        ignored += len(issues)
    return 1 if unusable or (args.strict and ignored) else 0


def _check_file(path: str) -> List[ConfigIssue]:
    document = read_json(path)
    kind = _file_kind(path, document)
    if kind == FAULT_CODE_FILE:
        levels, issues = fault_codes_from(document, path)
        print(f"{path}: {FAULT_CODE_FILE}, {len(levels)} codes")
        for code, level in sorted(levels.items(), key=lambda item: (-item[1], item[0])):
            print(f"  {code:<10} {level.name}")
    else:
        custom, issues = customization_from(document, path)
        print(f"{path}: {CUSTOMIZATION_FILE}, {len(custom.frequency)} FaultFrequency codes, "
              f"{len(custom.duration)} FaultDuration codes")
        _print_customization(custom)
    _print_issues(issues)
    return issues


def _file_kind(path: str, document: object) -> str:
    """Which of the two files `document` is: by its keys, else by its name."""
    if isinstance(document, dict):
        if any(key in SECTIONS for key in document):
            return CUSTOMIZATION_FILE
        if any(key in LEVEL_KEYS or key.endswith("Codes") for key in document):
            return FAULT_CODE_FILE
    name = os.path.basename(path).lower()
    if "customization" in name:
        return CUSTOMIZATION_FILE
    if "faultcode" in name:
        return FAULT_CODE_FILE
    raise PolicyFileError(path, f"neither a {FAULT_CODE_FILE} (keys like SeparateNPUCodes) nor a "
                          f"{CUSTOMIZATION_FILE} (sections {', '.join(SECTIONS)})")


def _print_customization(custom: Customization) -> None:
    grace = custom.grace
    print(f"  GraceTolerance: WaitProcessReadCMTime {grace.wait_process_read_cm_time} s, "
          f"WaitDeviceResetTime {grace.wait_device_reset_time} s, "
          f"WaitFaultSelfHealingTime {grace.wait_fault_self_healing_time} s")
    for code, rule in sorted(custom.frequency.items()):
        release = (f", released after {rule.release_time_window} s without the fault"
                   if rule.release_time_window else "")
        both = "; counts only faults that timed out (FaultDuration too)" if code in custom.duration else ""
        print(f"  FaultFrequency {code:<10} {rule.times} in {rule.time_window} s -> "
              f"{rule.handling.name}{release}{both}  [{rule.origin}]")
    for code, rule in sorted(custom.duration.items()):
        print(f"  FaultDuration  {code:<10} FaultTimeout {rule.fault_timeout} s, RecoverTimeout "
              f"{rule.recover_timeout} s -> {rule.handling.name}  [{rule.origin}]")


def _print_issues(issues: Iterable[ConfigIssue]) -> None:
    issues = list(issues)
    print(f"  ignored items: {len(issues)}")
    for issue in issues:
        print(f"  ignored {issue.item}: {issue.problem}")


# ---- explain -----------------------------------------------------------------------------------

def run_explain(args) -> int:
    try:
        config = read_policy(args.fault_code, args.customization)
    except PolicyFileError as error:
        print(f"{PROG} explain: {error}", file=sys.stderr)
        return 1
    for issue in config.issues:
        print(f"{PROG} explain: warning: {issue}", file=sys.stderr)
    if not args.json:
        print(f"# rules: {', '.join(config.sources)}")
    engine = PolicyEngine(config)
    enabled = args.enabled.split(",")
    events = 0
    try:
        for event in read_event_log(args.events):
            events += 1
            _emit(engine.handle(event), args, enabled)
        if args.until is not None and args.until >= engine.now:
            _emit(engine.advance(args.until), args, enabled)
    except EventLogError as error:
        print(f"{PROG} explain: {error}", file=sys.stderr)
        return 1
    if not args.json:
        _print_summary(engine, events)
    return 0


def _emit(decisions: List[Decision], args, enabled: List[str]) -> None:
    for decision in decisions:
        strategy = strategy_for(decision.level, args.sub_healthy_strategy, enabled)
        if args.json:
            print(json.dumps({"time": decision.time, "device": decision.device, "code": decision.code,
                              "kind": decision.kind, "level": decision.level.name,
                              "isolation": decision.isolation.value, "strategy": strategy.value,
                              "count": decision.count, "reason": decision.reason}))
        else:
            print(f"t={seconds(decision.time):<10} device {decision.device:<4} {decision.code or '-':<10} "
                  f"{decision.kind:<9} {decision.level.name:<19} {decision.isolation.value:<18} "
                  f"{strategy.value:<7} {decision.reason}")


def _print_summary(engine: PolicyEngine, events: int) -> None:
    isolated = engine.isolated_devices()
    states = ", ".join(f"device {device} {state.value}" for device, state in isolated.items())
    until = f" up to t={seconds(engine.now)}" if events else ""
    print(f"# {events} events replayed{until}; isolated: {states or 'none'}")
