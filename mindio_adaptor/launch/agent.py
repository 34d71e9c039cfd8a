"""The launcher of one node: start the local workers, watch them, answer each exit (launch/worker_exits), follow
what the other nodes' launchers decided, and end with one summary line and an exit code:
0 every worker exited 0 or left the job (LEFT_THE_JOB: a scale-in dropped it, and the job went on without
it); ENDED_BY_CONTROLLER (86) the recovery controller ended the job; 1 a failure with no restarts left (or
another node's, or node 0 lost and not replaced within --node0-wait); 128+N the launcher was stopped by
signal N."""
from __future__ import annotations

import signal
import time
from typing import Dict, Optional

from torch.distributed import DistError

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, describe
from mindio_adaptor.core.job import hand_over
from mindio_adaptor.core.job.paired_store import ENV_STORES
from mindio_adaptor.launch import node0_loss
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import ControllerStartError, HostedController, controllers_env
from mindio_adaptor.launch.hand_overs import HandOvers
from mindio_adaptor.launch.job_controllers import JobControllers
from mindio_adaptor.launch.local_workers import LocalWorkers
from mindio_adaptor.launch.node_liveness import beat_period
from mindio_adaptor.launch.node_store import EXIT_BARRIER_S, NodeStore
from mindio_adaptor.launch.policy import Outcome
from mindio_adaptor.launch.unreplaced_nodes import UnreplacedNodes
from mindio_adaptor.launch.warm_pool import WarmPool
from mindio_adaptor.launch.worker import Worker
from mindio_adaptor.launch.worker_exits import WorkerExits
from mindio_adaptor.launch.worker_starts import WorkerStarts

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)  # torchrun's


class NodeAgent:
    def __init__(self, config: LaunchConfig, store: NodeStore, log, warm: WarmPool, template=None):
        self.config, self.store, self.log, self.warm = config, store, log, warm
        self.workers = LocalWorkers([Worker(lr, config.global_rank(lr)) for lr in range(config.nproc_per_node)], log)
        self.generation = 0
        self.ended = False  # the recovery controller ended the job: restart nothing
        self.signalled: Optional[int] = None
        self.controller = HostedController(config, store, log)
        self._owner_checked = 0.0  # when this launcher last confirmed it still owns its node rank
        self.fenced = False  # another launcher took this node rank: leave the job to it
        self._unreplaced: Optional[UnreplacedNodes] = None  # node 0's: lost nodes nothing takes, reported
        self.hand_overs = HandOvers(log)  # workers that handed their rank over to a new process (hot switch)
        self.starts = WorkerStarts(config, store, log, warm, self.controller, self.hand_overs, template)
        self.job_controllers = JobControllers(config.master_addr, store.token, self.starts.lists, log)
        self.drained = False  # every local rank was handed over to a standby launcher's workers
        self.exits = WorkerExits(self)

    @property
    def master_port(self) -> int:
        """The generation's workers' store port, as last read (launch/membership.KnownLists)."""
        return self.starts.lists.master_port

    # --- the run ---------------------------------------------------------------------------------------

    def run(self) -> int:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        try:
            return self._run()
        finally:  # also when the launcher itself fails: nothing it started may outlive it
            self.warm.close()
            self.controller.stop()
            if self._unreplaced is not None:
                self._unreplaced.close()
            self.store.ownership.stop_beat()
            self.hand_overs.close()

    def _run(self) -> int:
        outcome = self._watch()
        self.warm.close()
        self.log.info("summary: %s; exit code %d; group restarts %d; restarts per rank: %s", outcome.what,
                      outcome.code, self.generation, self.workers.restarts())
        if self.fenced or self.drained:  # the node's place is another launcher's: nothing to say as done
            return outcome.code
        try:
            # A node hosting a controller keeps it until every node is done: it may lead the job by then. Not
            # a node whose workers all left a job that goes on: see LocalWorkers.all_left.
            keeps_controller = self.controller.hosted and not self.workers.all_left()
            if self.controller.hosted and not keeps_controller:
                self.log.info("every worker of this node left the job, which goes on: the node ends now, not at "
                              "the job's end, and its controller with it; the processors follow the next of the list")
            if not self.store.leave(wait_for_all=keeps_controller):
                self.log.info("stopped waiting for the other nodes to finish after %.0f s", EXIT_BARRIER_S)
        except DistError:  # node 0 is gone: nobody to tell
            pass
        return outcome.code

    def _on_signal(self, signum, _frame):
        self.signalled = self.signalled or signum

    def _watch(self) -> Outcome:
        try:
            generation = self.store.generation()
            self.controller.start(generation)
            self.starts.lists.controllers = controllers_env(self.config, self.store, generation)
            self._start_generation(generation, replacing=self.store.ownership.replacing)
            if self.store.hosting:
                self._unreplaced = UnreplacedNodes(self.store, self.config.nproc_per_node, self.config.nnodes,
                                                   self.config.node_lost_after, self.log)
            while True:
                self.controller.check()
                if self._unreplaced is not None and not self.ended:
                    self._unreplaced.check(self.job_controllers.no_replacement)
                self.starts.refill_warm_when_due()
                try:
                    outcome = self._check()
                except DistError as err:  # once back, what happened meanwhile (a worker's exit) is answered
                    outcome = node0_loss.answer_lost_store(self, err) or self._check()
                if outcome:
                    return outcome
                self.workers.stop_rebooted_after_the_end(self.ended)
                if not self.workers.any_running():
                    return self.workers.finished(self.ended)
                time.sleep(self.config.monitor_interval)
        except DistError as err:  # node 0's launcher is gone, and the stores with it
            self.stop(signal.SIGTERM, "lost the launchers' store")
            return Outcome(1, f"lost the launchers' store on node 0 ({err})")
        except ControllerStartError as err:
            self.stop(signal.SIGTERM, "no controller")
            self.publish_end(str(err))
            return Outcome(1, str(err))

    def _check(self) -> Optional[Outcome]:
        # The other nodes first: a worker that just died of their group restart must follow it, not be
        # rebooted into the old generation.
        return self.check_signal() or self._check_ownership() or self._check_other_nodes() or self.exits.check()

    # --- starting ----------------------------------------------------------------------------------------

    def _start_generation(self, generation: int, replacing: bool = False) -> None:
        self.generation = generation
        self.starts.lists.master_port = self.store.open_generation(generation)
        if replacing:
            self.starts.joined_generation = generation
        # The ranks of a drained node were handed over alive: their new processes are a hot switch's.
        kind = hand_over.HOT_SWITCH if replacing and self.store.ownership.took_drained_node else hand_over.ARF
        pids = [self.starts.start(w, generation, restarted=replacing, reboot_type=kind) for w in self.workers]
        warm, stores = sum(w.warm for w in self.workers), self.starts.lists.stores
        self.log.info("generation %d: started ranks %s as pids %s%s%s; workers' store at %s:%d%s", generation,
                      [w.rank for w in self.workers], pids,
                      (" to take the drained node's" if kind == hand_over.HOT_SWITCH else
                       " to replace the lost node's") if replacing else "",
                      f" ({warm} warm)" if warm else "", self.config.master_addr, self.master_port,
                      f", beside the controllers {stores[ENV_STORES]}" if stores else "")
        self.starts.refill_warm(at_once=not replacing)

    # --- watching ----------------------------------------------------------------------------------------

    def check_signal(self) -> Optional[Outcome]:
        if self.signalled is None:
            return None
        name = signal.Signals(self.signalled).name
        self.log.info("received %s: passing it to the workers, SIGKILL after %.0f s", name,
                      self.config.shutdown_timeout)
        self.stop(self.signalled, f"received {name}")
        self.publish_end(f"node {self.config.node_rank}'s launcher received {name}")
        return Outcome(128 + self.signalled, f"stopped by {name}")

    def _check_ownership(self) -> Optional[Outcome]:
        """A launcher silent for longer than --node-lost-after (a stalled host) may have been replaced: then
        its workers are stopped at once, as the replacement's take their ranks."""
        now = time.monotonic()
        if now - self._owner_checked < beat_period(self.config.node_lost_after):
            return None
        self._owner_checked = now
        if self.store.ownership.still_owner():
            if not self.store.hosting:
                self.store.node0.note_owner()
            return None
        self.fenced = True
        self.log.info("another launcher took node rank %d (this one was silent for more than %g s): stopping "
                      "this node's workers", self.config.node_rank, self.config.node_lost_after)
        self.stop(signal.SIGKILL, "node rank taken over")
        return Outcome(1, f"node rank {self.config.node_rank} was taken over by another launcher")

    def _check_other_nodes(self) -> Optional[Outcome]:
        """What the other launchers decided: the job ends, the controller ended it, or a group restart."""
        reason = self.store.end_reason()
        if reason:
            self.stop(signal.SIGTERM, "the job ends")
            return Outcome(1, f"the job ends: {reason}")
        if not self.ended and self.store.controller_ended():
            self.ended = True
            self.log.info("the recovery controller ended the job (seen on another node): nothing is restarted")
        self.follow_generation()
        return None

    def follow_generation(self) -> bool:
        """Join a group restart another node started; True when there was one."""
        generation = self.store.generation()
        if generation <= self.generation or self.ended:
            return False
        self.log.info("another node restarts the whole group: generation %d", generation)
        self.restart_group(generation)
        return True

    def restart_group(self, generation: int) -> None:
        """This node's part of a group restart into `generation`: the controllers of the earlier one stopped
        first (launch/controllers), then the workers, then a new controller and new workers."""
        self.controller.stand_down(generation)
        if self._stop_for_group_restart():
            self.controller.start(generation)
            self._start_generation(generation)

    def _stop_for_group_restart(self) -> bool:
        """Stop every local worker for a group restart; False when the restart must not start: a worker
        exited ENDED_BY_CONTROLLER (before or during the stop: the controller decided the end meanwhile) or
        another node saw one. Nothing is restarted after a decided end (docs/launch.md)."""
        codes = self.stop(signal.SIGTERM, "group restart")
        ended = sorted(rank for rank, code in codes.items() if code == ENDED_BY_CONTROLLER)
        if not ended and not self.store.controller_ended():
            return True
        self.ended = True
        self.store.mark_controller_end()
        self.log.info("no group restart: the recovery controller ended the job (%s); nothing is restarted",
                      f"ranks {ended} exited {describe(ENDED_BY_CONTROLLER)}" if ended else "seen on another node")
        return False

    # --- stopping ------------------------------------------------------------------------------------------

    def stop(self, sig: int, why: str) -> Dict[int, int]:
        return self.workers.stop(sig, why, self.config.shutdown_timeout)

    def publish_end(self, reason: str) -> None:
        try:
            self.store.end(reason)
        except RuntimeError:  # node 0 is gone: nobody is left to tell
            pass
