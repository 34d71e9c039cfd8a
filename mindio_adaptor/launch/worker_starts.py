"""How a launcher starts a process for one of its workers: with the job's lists as the launchers' store holds
them at that moment (launch/membership), the re-hosted slot where it applies, where it marks a hand-over
(core/job/hand_over), and in a warm worker when one waits (launch/warm_pool), which is then refilled once the
recovery it serves had its time; else forked from the worker template when the launcher has one
(launch/forked_workers)."""
from __future__ import annotations

import time
from typing import Dict, Optional

from mindio_adaptor.core.job import hand_over
from mindio_adaptor.launch import membership
from mindio_adaptor.launch.membership import KnownLists
from mindio_adaptor.launch.warm_pool import script_argv
from mindio_adaptor.launch.worker import Worker
from mindio_adaptor.launch.worker_env import worker_env


class WorkerStarts:
    def __init__(self, config, store, log, warm, controller, hand_overs, template=None):
        self.config, self.store, self.log, self.warm, self.template = config, store, log, warm, template
        self.controller, self.hand_overs = controller, hand_overs
        self.lists = KnownLists()
        self.joined_generation: Optional[int] = None  # a replacing launcher: the generation it joined
        self._refill_at: Optional[float] = None  # when the warm pool is filled again after a hand-out

    def env_for(self, worker: Worker, generation: int, restarted: bool,
                reboot_type: str = hand_over.ARF) -> Dict[str, str]:
        """What a process of `worker` started now gets: the job's current lists, the re-hosted slot where it
        applies (launch/membership), and where it marks a hand-over (core/job/hand_over)."""
        worker.given = self.lists.refresh(self.config, self.store, generation)
        rehosted = membership.rehosted_slot_env(self.config, self.store, self.controller.rehosts,
                                                self.joined_generation, generation)
        return worker_env(self.config, worker.local_rank, worker.given.master_port,
                          restart_count=generation + worker.reboots, restarted=restarted,
                          token=self.store.token,
                          extra={**worker.given.lists, **rehosted, **self.hand_overs.env(),
                                 hand_over.ENV_REBOOT_TYPE: reboot_type})

    def start(self, worker: Worker, generation: int, restarted: bool, alone: bool = False,
              reboot_type: str = hand_over.ARF) -> int:
        """A replacement takes a warm worker when there is one (then the pool is refilled), else a new process."""
        env = self.env_for(worker, generation, restarted, reboot_type)
        worker.alone = alone
        warm = self.warm.take() if restarted else None
        if warm is not None:
            try:
                return worker.hand_to(warm, env, script_argv(self.config))
            except OSError:  # it died since it was started: a new process then
                pass
        return worker.start(self.config.command, env, self.template)

    def refill_warm(self, at_once: bool = False) -> None:
        """New warm workers build a model, as the ranks just handed out do to join: started beside a
        recovery they slow it down (several seconds on a busy host), so after a hand-out they wait."""
        self._refill_at = time.monotonic() + (0.0 if at_once else self.config.warm_refill_delay)
        self.refill_warm_when_due()

    def refill_warm_when_due(self) -> None:
        if self._refill_at is None or time.monotonic() < self._refill_at:
            return
        self._refill_at = None
        spares = self.warm.fill()
        if spares:
            self.log.info("warm spare workers started: pids %s", spares)
