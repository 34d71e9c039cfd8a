"""The sub-health signals acted on by policy (core/policy/sub_health), from the controller's own events: a
rank's sub-health report (event sub_health, e.g. MINDIO-SDC) and a rank turning slow (event slow_rank, code
MINDIO-SLOW), and a node that became a repeat offender (status/offender_watch, code MINDIO-OFFENDER, for the rank
whose incident made it one). Hosted where the controller runs and polled as the offender watch is.

Configured by the environment of the controller's host:
- MINDIO_SUB_HEALTHY_STRATEGY: ignore (default), hotSwitch, graceExit, forceExit;
- MINDIO_FAULT_CODE_FILE, MINDIO_FAULT_CUSTOMIZATION_FILE: the operator's faultCode.json and
  faultCustomization.json (default: the shipped ones, which list MINDIO-SLOW and MINDIO-SDC as SubHealthFault);
- MINDIO_SUB_HEALTH_QUIET_S (default 600, 0..86400): after acting on a rank (a hot switch, a replacement), its
  signals within this long are warned about, not acted on: a device that stays slow after its rank moved to a
  new process on the same node is not helped by moving it again and again.
A refused action (a hot switch without process replacement, say) is said with the controller's reason; the
signal is then only warned about."""
from __future__ import annotations

import logging
import os
import re
import time
from typing import Callable, Dict, List, Mapping, Optional

from mindio_adaptor.core.policy import PolicyEngine, load_policy
from mindio_adaptor.core.policy.sub_health import OFFENDER, SLOW, Action, action_for, check_strategy
from mindio_adaptor.core.process.env_values import seconds_from_env
from mindio_adaptor.ttp.fault_policy import FaultPolicy

logger = logging.getLogger(__name__)

ENV_STRATEGY = "MINDIO_SUB_HEALTHY_STRATEGY"
ENV_CODES, ENV_CUSTOM = "MINDIO_FAULT_CODE_FILE", "MINDIO_FAULT_CUSTOMIZATION_FILE"
ENV_QUIET = "MINDIO_SUB_HEALTH_QUIET_S"
SUB_HEALTH = re.compile(r"^rank (\d+)(?: \(node .*\))?: (\S+)$")
SLOW_RANK = re.compile(r"^rank (\d+): ")


def signal_of(kind: str, detail: str) -> Optional[tuple]:
    """(rank, code) of a sub-health signal among the controller's events, else None."""
    found = SUB_HEALTH.match(detail) if kind == "sub_health" else SLOW_RANK.match(detail) if kind == "slow_rank" \
        else None
    if found is None:
        return None
    return int(found[1]), found[2] if kind == "sub_health" else SLOW


def node_ranks(ranks: list, rank: int) -> list:
    """The live ranks of `rank`'s node (its failure domain as it reported it; itself alone when it reported
    none)."""
    domain = ranks[rank]["domain"]
    if not domain:
        return [rank]
    return [r for r, entry in enumerate(ranks)
            if entry["domain"] == domain and not {"dead", "left"} & set(entry["flags"])]


class SubHealthResponder:
    def __init__(self, policy: FaultPolicy, strategy: str, controller, quiet_s: float = 600.0,
                 say: Callable[[str], None] = logger.warning, clock: Callable[[], float] = time.monotonic):
        """`controller`: the API it acts through (mindio_adaptor.ttp.controller)."""
        self.policy, self.strategy, self.ctl = policy, check_strategy(strategy), controller
        self.quiet_s, self._say, self._clock = quiet_s, say, clock
        self._seen = 0
        self._acted: Dict[int, float] = {}  # rank -> when it was last acted on

    @classmethod
    def from_env(cls, controller, env: Mapping[str, str] = os.environ, **kwargs) -> "SubHealthResponder":
        """ValueError (or core/policy's PolicyFileError) naming a bad setting."""
        strategy = check_strategy(env.get(ENV_STRATEGY, "ignore"))
        quiet = seconds_from_env(ENV_QUIET, 600.0, 0, 86400, env)
        engine = PolicyEngine(load_policy(env.get(ENV_CODES) or None, env.get(ENV_CUSTOM) or None))
        return cls(FaultPolicy(engine, "ignore"), strategy, controller, quiet, **kwargs)

    def poll(self) -> None:
        events = self.ctl.controller_events()
        new, self._seen = events[self._seen:], len(events)
        for _, kind, detail in new:
            found = signal_of(kind, detail)
            if found:
                self._respond(*found)

    def offender(self, rank: int) -> None:
        """The offender watch's word that `rank`'s node became a repeat offender."""
        self._respond(rank, OFFENDER)

    def _respond(self, rank: int, code: str) -> None:
        level = self.policy.level(rank, code)
        action = action_for(level, self.strategy)
        what = f"sub-health policy: rank {rank} {code} -> {level.name} -> {action}"
        if action is Action.IGNORE:
            return
        if action is Action.WARN:
            return self._say(what)
        last = self._acted.get(rank)
        if last is not None and self._clock() - last < self.quiet_s:
            return self._say(f"{what}: not acted on, rank {rank} was acted on {self._clock() - last:.0f} s ago "
                             f"({ENV_QUIET}={self.quiet_s:g})")
        try:
            moved = self._act(action, rank)
        except (ValueError, RuntimeError) as err:
            return self._say(f"{what}: refused ({err}); training goes on")
        self._acted.update({r: self._clock() for r in moved})
        self._say(f"{what}: asked for" + (f" (ranks {moved})" if moved != [rank] else ""))

    def _act(self, action: Action, rank: int) -> List[int]:
        """Asks the controller for `action`; the ranks it moves."""
        if action is Action.DUMP:
            self.ctl.tft_notify_controller_dump()
            return [rank]
        moved = [rank] if action is Action.HOT_SWITCH else node_ranks(self.ctl.controller_ranks(), rank)
        self.ctl.hot_switch(moved)
        return moved
