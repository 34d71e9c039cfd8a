"""What to do about a sub-health signal: a rank that still trains but is suspect.

The signals are fault codes of ours, listed under SubHealthFaultCodes in the shipped faultCode.json, so that
an operator's own file may move them to another level:
- MINDIO-SLOW: a rank stays slower than its peers' median for several windows (csrc/controller/slow_ranks.h);
- MINDIO-SDC: a rank's copy of an optimizer shard was found corrupted (patches/silent_corruption);
- MINDIO-OFFENDER: a rank's node became a repeat offender (status/offender_watch), by that rank's incident.

The action follows the level in force for the code on that rank (a PolicyEngine: its frequency and duration
rules apply as to any fault):
- NotHandleFault: ignore (the controller still flags the rank and says it once);
- SubHealthFault: the job's subHealthyStrategy: "ignore" warns (training goes on, as the reference's ignore),
  "hotSwitch" moves the rank to a new process with no step lost, "graceExit" ends the job with a dying-gasp
  checkpoint; "forceExit" (the reference: leave without saving) is taken as graceExit here, since the
  checkpoint costs a few seconds and never loses anything;
- a level that takes the device out of service (FreeRestartNPU, RestartNPU, SeparateNPU,
  ManuallySeparateNPU): separate the node, i.e. a hot switch of every live rank of the rank's node, which a
  waiting standby launcher takes over (without one, the ranks get new processes on the node itself);
- any other level (RestartRequest, RestartBusiness, PreSeparateNPU): warn. Re-running a step does nothing for a
  slow or corrupting device.
"""
from __future__ import annotations

from enum import Enum

from mindio_adaptor.core.policy.levels import Level

SLOW = "MINDIO-SLOW"
SDC = "MINDIO-SDC"
OFFENDER = "MINDIO-OFFENDER"


class Action(str, Enum):
    IGNORE = "ignore"
    WARN = "warn"
    HOT_SWITCH = "hot switch"
    SEPARATE = "separate the node"  # a hot switch of every rank of its node (a drain)
    DUMP = "dump"  # the job ends with a dying-gasp checkpoint

    def __str__(self) -> str:
        return self.value


# The reference's subHealthyStrategy values, with its hot switch.
ON_SUB_HEALTH = {"ignore": Action.WARN, "hotSwitch": Action.HOT_SWITCH, "graceExit": Action.DUMP,
                 "forceExit": Action.DUMP}
SEPARATING = frozenset({Level.FreeRestartNPU, Level.RestartNPU, Level.SeparateNPU, Level.ManuallySeparateNPU})


def check_strategy(sub_healthy_strategy: str) -> str:
    if sub_healthy_strategy not in ON_SUB_HEALTH:
        raise ValueError(f"subHealthyStrategy {sub_healthy_strategy!r} is not one of {', '.join(ON_SUB_HEALTH)}")
    return sub_healthy_strategy


def action_for(level: Level, sub_healthy_strategy: str) -> Action:
    if level == Level.NotHandleFault:
        return Action.IGNORE
    if level == Level.SubHealthFault:
        return ON_SUB_HEALTH[check_strategy(sub_healthy_strategy)]
    return Action.SEPARATE if level in SEPARATING else Action.WARN

