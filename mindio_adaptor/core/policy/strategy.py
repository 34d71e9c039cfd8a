"""From a fault level to what the controller does to the training job.

The controller has four ways to handle a fault (section 6 of the reference notes): retry (online
repair: survivors keep their processes, the faulty rank's state is copied from a replica and the
step recomputed), recover (replace the failed process, then repair), dump (write one dying-gasp
checkpoint, then exit) and exit. NONE means training carries on untouched.

Why each level maps where it does:
- RestartRequest / RestartBusiness: the work must be re-run but the device is usable; the in-job
  form of "re-run" is the online repair (the reference repairs its RestartBusiness HBM error,
  80E01801, exactly this way).
- FreeRestartNPU / RestartNPU: the chip needs a reset, which must not happen while training runs on
  it, so the process on it is stopped and replaced (recover).
- SeparateNPU / ManuallySeparateNPU: the device is out of service; only a replacement elsewhere helps.
- PreSeparateNPU: no impact now; the engine marks the device pre-separated so nothing new lands there.
- SubHealthFault: the job's subHealthyStrategy decides: ignore, graceExit (dying-gasp checkpoint,
  then leave the node: dump) or forceExit (leave without saving: exit); hotSwitch acts on sub-health
  signals only (core/policy/sub_health), so a fault under it is ignore's.
When the chosen strategy is not enabled for the job, the next more drastic one is used
(retry -> recover -> dump -> exit): falling back to something milder would leave the fault unhandled.
"""
from __future__ import annotations

from enum import Enum
from typing import Iterable, Mapping, Optional, Tuple

from mindio_adaptor.core.policy.levels import Level


class Strategy(str, Enum):
    NONE = "none"
    RETRY = "retry"
    RECOVER = "recover"
    DUMP = "dump"
    EXIT = "exit"

    def __str__(self) -> str:
        return self.value


SUB_HEALTHY_STRATEGIES: Mapping[str, Strategy] = {
    "ignore": Strategy.NONE,
    # A hot switch moves a rank that still trains (core/policy/sub_health); a fault already reported is left to
    # the built-in decision.
    "hotSwitch": Strategy.NONE,
    "graceExit": Strategy.DUMP,
    "forceExit": Strategy.EXIT,
}
DEFAULT_SUB_HEALTHY_STRATEGY = "ignore"

LEVEL_STRATEGIES: Mapping[Level, Strategy] = {
    Level.NotHandleFault: Strategy.NONE,
    Level.RestartRequest: Strategy.RETRY,
    Level.RestartBusiness: Strategy.RETRY,
    Level.FreeRestartNPU: Strategy.RECOVER,
    Level.RestartNPU: Strategy.RECOVER,
    Level.PreSeparateNPU: Strategy.NONE,
    Level.SeparateNPU: Strategy.RECOVER,
    Level.ManuallySeparateNPU: Strategy.RECOVER,
}

FALLBACKS: Mapping[Strategy, Tuple[Strategy, ...]] = {
    Strategy.NONE: (Strategy.NONE,),
    Strategy.RETRY: (Strategy.RETRY, Strategy.RECOVER, Strategy.DUMP, Strategy.EXIT),
    Strategy.RECOVER: (Strategy.RECOVER, Strategy.DUMP, Strategy.EXIT),
    Strategy.DUMP: (Strategy.DUMP, Strategy.EXIT),
    Strategy.EXIT: (Strategy.EXIT,),
}
# Doing nothing and exiting need no capability of the adaptor.
ALWAYS_AVAILABLE = frozenset({Strategy.NONE, Strategy.EXIT})


def preferred_strategy(level: Level, sub_healthy_strategy: str = DEFAULT_SUB_HEALTHY_STRATEGY) -> Strategy:
    """What `level` asks for when every strategy is enabled."""
    if level == Level.SubHealthFault:
        if sub_healthy_strategy not in SUB_HEALTHY_STRATEGIES:
            raise ValueError(f"subHealthyStrategy {sub_healthy_strategy!r} is not one of "
                             f"{', '.join(SUB_HEALTHY_STRATEGIES)}")
        return SUB_HEALTHY_STRATEGIES[sub_healthy_strategy]
    return LEVEL_STRATEGIES[level]


def strategy_for(level: Level, sub_healthy_strategy: str = DEFAULT_SUB_HEALTHY_STRATEGY,
                 enabled: Optional[Iterable[str]] = None) -> Strategy:
    """What the controller does for a fault of `level`. `enabled` holds the strategies the job
    turned on (e.g. the reference's HIGH_AVAILABILITY list "dump,retry,recover"; unknown entries
    such as "elastic-training" are ignored); None means all."""
    preferred = preferred_strategy(level, sub_healthy_strategy)
    available = set(Strategy) if enabled is None else _parse_enabled(enabled) | ALWAYS_AVAILABLE
    return next(strategy for strategy in FALLBACKS[preferred] if strategy in available)


def _parse_enabled(enabled: Iterable[str]) -> set:
    values = {strategy.value: strategy for strategy in Strategy}
    return {values[name.strip()] for name in enabled if name.strip() in values}
