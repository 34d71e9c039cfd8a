"""The fault policy the controller consults (ours; the reference has no such call).

The controller (C++) knows nothing of fault levels: for every reported fault that carries an error
code it calls an opaque `policy(rank, report_state, code) -> strategy name` on a helper thread, waits
a bounded time, and lets the answer make its own decision more drastic, never milder (see
docs/policy.md). `FaultPolicy` is that callable built on `mindio_adaptor.core.policy`: it feeds the
report to a `PolicyEngine` as an `occur` event at the current monotonic time and maps the most severe
resulting level with `strategy_for`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional, Sequence, Union

from mindio_adaptor.core.policy import FaultEvent, Level, PolicyConfig, PolicyEngine, load_policy, strategy_for
from mindio_adaptor.core.policy.engine import Isolation
from mindio_adaptor.core.policy.strategy import SUB_HEALTHY_STRATEGIES

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
MIN_TIMEOUT_S = 0.01
MAX_TIMEOUT_S = 600.0

# A device isolated by an earlier fault stays at least this serious for any new fault on it:
# retrying on a device the policy has taken out of service would defeat the isolation.
_ISOLATION_LEVELS = {
    Isolation.SEPARATED: Level.SeparateNPU,
    Isolation.MANUALLY_SEPARATED: Level.ManuallySeparateNPU,
}

PolicySpec = Union[None, PolicyEngine, PolicyConfig, str, os.PathLike, Sequence, Callable]


class FaultPolicy:
    """`(rank, report_state, code) -> strategy name` over a PolicyEngine. The engine is not
    thread-safe and keeps counts across faults, so calls are serialised and the engine lives as long
    as the policy does."""

    def __init__(self, engine: PolicyEngine, sub_healthy_strategy: str = "ignore",
                 clock: Callable[[], float] = time.monotonic):
        if not isinstance(engine, PolicyEngine):
            raise TypeError(f"FaultPolicy needs a PolicyEngine, got {type(engine).__name__}")
        if sub_healthy_strategy not in SUB_HEALTHY_STRATEGIES:
            raise ValueError(f"sub_healthy_strategy {sub_healthy_strategy!r} is not one of "
                             f"{', '.join(SUB_HEALTHY_STRATEGIES)}")
        self.engine = engine
        self.sub_healthy_strategy = sub_healthy_strategy
        self._clock = clock
        self._lock = threading.Lock()

    def level(self, rank: int, code: str) -> Level:
        """Feed one occurrence of `code` on `rank` and return the most severe level in force for
        that device afterwards (its decisions, and any isolation it is under)."""
        with self._lock:
            decisions = self.engine.handle(FaultEvent(time=self._clock(), device=rank, kind="occur", code=code))
        mine = [d for d in decisions if d.device == rank]
        levels = [d.level for d in mine] + [_ISOLATION_LEVELS.get(d.isolation, Level.NotHandleFault) for d in mine]
        return max(levels, default=Level.NotHandleFault)

    def __call__(self, rank: int, report_state: int, code: str) -> str:
        level = self.level(rank, code)
        strategy = strategy_for(level, self.sub_healthy_strategy).value
        logger.info("fault policy: rank %d code %s (report state %d) -> %s -> %s", rank, code, report_state,
                    level.name, strategy)
        return strategy


def make_policy(policy: PolicySpec, sub_healthy_strategy: str = "ignore") -> Optional[Callable]:
    """The callable the controller calls, from what a user may pass:
    None (no policy), a PolicyEngine, a PolicyConfig, a faultCode.json path, a
    (faultCode.json, faultCustomization.json) pair of paths (either may be None: the shipped file),
    or any callable `(rank, report_state, code) -> strategy name`."""
    if policy is None:
        return None
    if isinstance(policy, PolicyEngine):
        return FaultPolicy(policy, sub_healthy_strategy)
    if isinstance(policy, PolicyConfig):
        return FaultPolicy(PolicyEngine(policy), sub_healthy_strategy)
    if isinstance(policy, (str, os.PathLike)):
        return FaultPolicy(PolicyEngine(load_policy(os.fspath(policy))), sub_healthy_strategy)
    if isinstance(policy, (tuple, list)):
        if len(policy) != 2:
            raise ValueError(f"a policy given as paths must be (faultCode.json, faultCustomization.json), "
                             f"got {len(policy)} items")
        codes, custom = (None if p is None else os.fspath(p) for p in policy)
        return FaultPolicy(PolicyEngine(load_policy(codes, custom)), sub_healthy_strategy)
    if callable(policy):
        return policy
    raise TypeError(f"policy must be None, a PolicyEngine, a PolicyConfig, a path, a pair of paths or a "
                    f"callable, got {type(policy).__name__}")


def check_timeout(timeout_s: float) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or \
            not MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"policy timeout_s must be a number of seconds in {MIN_TIMEOUT_S}..{MAX_TIMEOUT_S}, "
                         f"got {timeout_s!r}")
    return float(timeout_s)
