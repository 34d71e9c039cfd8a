"""Fault levels and escalation policies (faultCode.json / faultCustomization.json).

`load_policy()` reads the two files (the shipped defaults when no path is given), `PolicyEngine`
turns fault events into the handling of each fault and each device's isolation, and `strategy_for`
turns a handling into what the controller does. See docs/policy.md.
"""
from mindio_adaptor.core.policy.config import load_policy, read_policy
from mindio_adaptor.core.policy.engine import Decision, Isolation, PolicyEngine
from mindio_adaptor.core.policy.events import FaultEvent, read_event_log
from mindio_adaptor.core.policy.levels import Level
from mindio_adaptor.core.policy.rules import ConfigIssue, PolicyConfig, PolicyFileError
from mindio_adaptor.core.policy.strategy import Strategy, strategy_for

__all__ = ["load_policy", "read_policy", "Decision", "Isolation", "PolicyEngine", "FaultEvent",
           "read_event_log", "Level", "ConfigIssue", "PolicyConfig", "PolicyFileError", "Strategy",
           "strategy_for"]
