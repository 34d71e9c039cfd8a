"""The launcher of one node: start the local workers, watch them, answer each exit (policy.on_exit), follow
what the other nodes' launchers decided, and end with one summary line and an exit code:
0 every worker exited 0 or left the job (LEFT_THE_JOB: a scale-in dropped it, and the job went on without
it); ENDED_BY_CONTROLLER (86) the recovery controller ended the job; 1 a failure with no restarts left (or
another node's, or node 0 lost and not replaced within --node0-wait); 128+N the launcher was stopped by
signal N."""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from torch.distributed import DistError

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, JOB_UNREACHABLE, LEFT_THE_JOB, describe
from mindio_adaptor.core.job import hand_over
from mindio_adaptor.core.job.paired_store import ENV_STORES
from mindio_adaptor.launch import node0_loss
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import ControllerStartError, HostedController, controllers_env
from mindio_adaptor.launch.hand_overs import HandOvers
from mindio_adaptor.launch.job_controllers import JobControllers
from mindio_adaptor.launch.node_liveness import beat_period
from mindio_adaptor.launch.node_store import EXIT_BARRIER_S, NodeStore
from mindio_adaptor.launch.policy import Verdict, on_exit
from mindio_adaptor.launch.unreplaced_nodes import UnreplacedNodes
from mindio_adaptor.launch.warm_pool import WarmPool
from mindio_adaptor.launch.worker import KILL_WAIT_S, Worker, stop_all
from mindio_adaptor.launch.worker_starts import WorkerStarts

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)  # torchrun's
# Once the recovery controller ended the job, how long a worker started again alone may go on: one that
# had joined got the controller's EXIT like every rank and ends within it; one still starting would try to
# register with controllers that are gone for minutes (TTP_RETRY_TIMES).
REBOOTED_AFTER_END_GRACE_S = 15.0
REBOOTED_STOP_GRACE_S = 5.0


@dataclass
class Outcome:
    code: int
    what: str


class NodeAgent:
    def __init__(self, config: LaunchConfig, store: NodeStore, log, warm: WarmPool):
        self.config, self.store, self.log, self.warm = config, store, log, warm
        self.workers = [Worker(lr, config.global_rank(lr)) for lr in range(config.nproc_per_node)]
        self.generation = 0
        self.ended = False  # the recovery controller ended the job: restart nothing
        self._ended_seen_at: Optional[float] = None  # when this launcher learned it
        self.signalled: Optional[int] = None
        self._reported: set = set()  # pids whose exit was already answered
        self.ended_after_leaving: Dict[int, int] = {}  # rank -> the exit of a process whose training was over
        self.left_the_job: List[int] = []  # ranks a scale-in dropped: their processes exited LEFT_THE_JOB
        self.controller = HostedController(config, store, log)
        self._owner_checked = 0.0  # when this launcher last confirmed it still owns its node rank
        self.fenced = False  # another launcher took this node rank: leave the job to it
        self._unreplaced: Optional[UnreplacedNodes] = None  # node 0's: lost nodes nothing takes, reported
        self.hand_overs = HandOvers(log)  # workers that handed their rank over to a new process (hot switch)
        self.starts = WorkerStarts(config, store, log, warm, self.controller, self.hand_overs)
        self.job_controllers = JobControllers(config.master_addr, store.token, self.starts.lists, log)
        self.drained = False  # every local rank was handed over to a standby launcher's workers

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
            self.store.stop_beat()
            self.hand_overs.close()

    def _run(self) -> int:
        outcome = self._watch()
        self.warm.close()
        self.log.info("summary: %s; exit code %d; group restarts %d; restarts per rank: %s", outcome.what,
                      outcome.code, self.generation,
                      ", ".join(f"rank {w.rank}: {w.starts - 1}" for w in self.workers))
        if self.fenced or self.drained:  # the node's place is another launcher's: nothing to say as done
            return outcome.code
        try:
            # A node hosting a controller keeps it until every node is done: it may lead the job by then. Not
            # a node whose workers all left a job that goes on: see _all_left.
            keeps_controller = self.controller.hosted and not self._all_left()
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
            self._start_generation(generation, replacing=self.store.replacing)
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
                    outcome = self._wait_for_new_node0(err) or self._check()
                if outcome:
                    return outcome
                self._stop_rebooted_after_the_end()
                if not any(w.running() for w in self.workers):
                    return self._finished()
                time.sleep(self.config.monitor_interval)
        except DistError as err:  # node 0's launcher is gone, and the stores with it
            self._stop(signal.SIGTERM, "lost the launchers' store")
            return Outcome(1, f"lost the launchers' store on node 0 ({err})")
        except ControllerStartError as err:
            self._stop(signal.SIGTERM, "no controller")
            self._publish_end(str(err))
            return Outcome(1, str(err))

    def _stop_rebooted_after_the_end(self) -> None:
        """Workers started again alone that still run REBOOTED_AFTER_END_GRACE_S after the controller ended
        the job have no job to join: stopped (SIGTERM, then SIGKILL), once."""
        if not self.ended:
            return
        now = time.monotonic()
        self._ended_seen_at = self._ended_seen_at or now
        if now - self._ended_seen_at < REBOOTED_AFTER_END_GRACE_S:
            return
        late = [w for w in self.workers if w.reboots and w.running()]
        if not late:
            return
        pids = {w.rank: w.pid for w in late}
        codes = stop_all(late, signal.SIGTERM, REBOOTED_STOP_GRACE_S)
        self._reported.update(pids.values())
        self.log.info("stopped %s, started again alone and still running %.0f s after the recovery controller "
                      "ended the job (no job to join): %s", ", ".join(f"rank {r} (pid {p})" for r, p in pids.items()),
                      REBOOTED_AFTER_END_GRACE_S, ", ".join(f"rank {r} {describe(c)}" for r, c in codes.items()))

    def _check(self) -> Optional[Outcome]:
        # The other nodes first: a worker that just died of their group restart must follow it, not be
        # rebooted into the old generation.
        return self._check_signal() or self._check_ownership() or self._check_other_nodes() or self._check_workers()

    def _wait_for_new_node0(self, err: DistError) -> Optional[Outcome]:
        """Node 0's launcher is gone with the launchers' store: keep the workers running and rejoin the store
        a new node 0 hosts at the same address (launch/node0_loss). Only with worker reboot: without it a new
        node 0's workers could not join the running job."""
        if self._all_exited_0():
            return self._finished_without_node0()
        if self.store.hosting or not self.config.worker_reboot:
            raise err
        waited = node0_loss.wait_for_new_node0(self.config, self.store, err, self.log, self.starts.lists,
                                               self.generation, self.ended, lambda: self.signalled is not None,
                                               self._all_exited_0)
        if waited == node0_loss.SIGNALLED:
            return self._check_signal()
        if waited == node0_loss.WORKERS_DONE:
            return self._finished_without_node0()
        return None if waited == node0_loss.REJOINED else self._no_new_node0()

    def _all_exited_0(self) -> bool:
        return all(w.poll() in (0, LEFT_THE_JOB) for w in self.workers)

    def _finished_without_node0(self) -> Outcome:
        """Every local worker exited 0: nothing to keep running, and node 0 may just have ended first (its end
        barrier took this node, slow to say it was done, for lost). An exit 0 needs no store."""
        self.log.info("the launchers' store on node 0 is gone, and every local worker exited 0: finishing")
        self._check_workers()
        return self._finished()

    def _no_new_node0(self) -> Outcome:
        cfg = self.config
        self._stop(signal.SIGTERM, "node 0 lost")
        return Outcome(1, f"lost the launchers' store on node 0 ({cfg.master_addr}:{self.store.port}) and no new "
                          f"node 0 came within {cfg.node0_wait:g} s (--node0-wait)")

    def _all_left(self) -> bool:
        """Every local worker left the job, which goes on without this node (a scale-in dropped their slices):
        the node ends now, its backup controller with it, rather than at the job's end. Its node rank must be
        free for their return (a new launcher of it brings the ranks back for a scale-out and hosts its
        controller's slot again); and a job that goes on for hours would find the exit barrier's bound
        (EXIT_BARRIER_S) stop that controller anyway. Node 0 hosts the launchers' store and waits in any case."""
        return len(self.left_the_job) == len(self.workers)

    def _finished(self) -> Outcome:
        if self.ended:
            return Outcome(ENDED_BY_CONTROLLER, "the recovery controller ended the job")
        count = len(self.workers) - len(self.ended_after_leaving) - len(self.left_the_job)
        what = f"{count} local worker{'s' if count != 1 else ''} exited 0"
        if self.left_the_job:  # dropped by a scale-in: this node's part is done as well
            what = (f"{what if count else 'no local worker exited 0'}; ranks {self.left_the_job} left the job, "
                    f"which went on without them (elastic training)")
        if self.ended_after_leaving:
            what += "; after leaving the job: " + ", ".join(f"rank {rank} {describe(code)}" for rank, code
                                                           in sorted(self.ended_after_leaving.items()))
        return Outcome(0, what)

    # --- starting ----------------------------------------------------------------------------------------

    def _start_generation(self, generation: int, replacing: bool = False) -> None:
        self.generation = generation
        self.starts.lists.master_port = self.store.open_generation(generation)
        if replacing:
            self.starts.joined_generation = generation
        # The ranks of a drained node were handed over alive: their new processes are a hot switch's.
        kind = hand_over.HOT_SWITCH if replacing and self.store.took_drained_node else hand_over.ARF
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

    def _check_signal(self) -> Optional[Outcome]:
        if self.signalled is None:
            return None
        name = signal.Signals(self.signalled).name
        self.log.info("received %s: passing it to the workers, SIGKILL after %.0f s", name,
                      self.config.shutdown_timeout)
        self._stop(self.signalled, f"received {name}")
        self._publish_end(f"node {self.config.node_rank}'s launcher received {name}")
        return Outcome(128 + self.signalled, f"stopped by {name}")

    def _check_ownership(self) -> Optional[Outcome]:
        """A launcher silent for longer than --node-lost-after (a stalled host) may have been replaced: then
        its workers are stopped at once, as the replacement's take their ranks."""
        now = time.monotonic()
        if now - self._owner_checked < beat_period(self.config.node_lost_after):
            return None
        self._owner_checked = now
        if self.store.still_owner():
            if not self.store.hosting:
                self.store.note_node0_owner()
            return None
        self.fenced = True
        self.log.info("another launcher took node rank %d (this one was silent for more than %g s): stopping "
                      "this node's workers", self.config.node_rank, self.config.node_lost_after)
        self._stop(signal.SIGKILL, "node rank taken over")
        return Outcome(1, f"node rank {self.config.node_rank} was taken over by another launcher")

    def _check_other_nodes(self) -> Optional[Outcome]:
        """What the other launchers decided: the job ends, the controller ended it, or a group restart."""
        reason = self.store.end_reason()
        if reason:
            self._stop(signal.SIGTERM, "the job ends")
            return Outcome(1, f"the job ends: {reason}")
        if not self.ended and self.store.controller_ended():
            self.ended = True
            self.log.info("the recovery controller ended the job (seen on another node): nothing is restarted")
        self._follow_generation()
        return None

    def _follow_generation(self) -> bool:
        """Join a group restart another node started; True when there was one."""
        generation = self.store.generation()
        if generation <= self.generation or self.ended:
            return False
        self.log.info("another node restarts the whole group: generation %d", generation)
        self._restart_group(generation)
        return True

    def _restart_group(self, generation: int) -> None:
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
        codes = self._stop(signal.SIGTERM, "group restart")
        ended = sorted(rank for rank, code in codes.items() if code == ENDED_BY_CONTROLLER)
        if not ended and not self.store.controller_ended():
            return True
        self.ended = True
        self.store.mark_controller_end()
        self.log.info("no group restart: the recovery controller ended the job (%s); nothing is restarted",
                      f"ranks {ended} exited {describe(ENDED_BY_CONTROLLER)}" if ended else "seen on another node")
        return False

    def _check_workers(self) -> Optional[Outcome]:
        handed, drained = self.hand_overs.ready(self.workers, self._may_drain)
        if drained:
            return self._drain(handed)
        for worker in handed:
            self._hand_over(worker)
        self.hand_overs.reap()
        for worker in self.workers:
            code = worker.poll()
            if code is None or worker.pid in self._reported:
                continue
            self._reported.add(worker.pid)
            outcome = self._answer(worker, code)
            if outcome:
                return outcome
        return None

    def _answer(self, worker: Worker, code: int) -> Optional[Outcome]:
        what = f"rank {worker.rank} (local rank {worker.local_rank}, pid {worker.pid}) ended: {describe(code)}"
        # A rank that exited LEFT_THE_JOB was retired by the controller before it exited: nothing to tell.
        had_left = (code not in (0, ENDED_BY_CONTROLLER, LEFT_THE_JOB)
                    and self.job_controllers.process_ended(worker, code))
        leftovers = worker.end_leftovers()
        if leftovers:
            self.log.info("rank %d: ended what its process left running in its process group: pids %s",
                          worker.rank, leftovers)
        if had_left:  # its training was over: a process started again would find no job to join
            self.ended_after_leaving[worker.rank] = code
            self.log.info("%s after it had left the job (its training was over): not restarted", what)
            return None
        if code not in (0, ENDED_BY_CONTROLLER) and self._follow_generation():
            self.log.info("%s, during another node's group restart", what)
            return None
        # Other nodes' workers are out of sight: assume they run (a launcher per node sees only its own).
        peers_running = self.config.nnodes > 1 or any(w.running() for w in self.workers if w is not worker)
        no_reboot = self._no_blind_reboot(worker, code)
        verdict = on_exit(code, worker_reboot=self.config.worker_reboot, ended=self.ended,
                          rank_reboots=worker.reboots, group_restarts=self.generation,
                          max_restarts=self.config.max_restarts, peers_running=peers_running,
                          reboots_stopped=bool(no_reboot))
        if no_reboot and verdict in (Verdict.RESTART_GROUP, Verdict.GIVE_UP):
            self.log.info("rank %d: no more reboots of this rank: %s", worker.rank, no_reboot)
        if verdict is Verdict.DONE:
            self.log.info("%s%s", what, "; not restarted: the recovery controller ended the job" if code else "")
        elif verdict is Verdict.ENDED:
            self.ended = True
            self.store.mark_controller_end()
            self.log.info("%s: the recovery controller ended the job; nothing is restarted from now on", what)
        elif verdict is Verdict.LEFT:
            self.left_the_job.append(worker.rank)
            self.log.info("%s: it left the job, which goes on without it (a scale-in dropped its data-parallel "
                          "slice); not restarted", what)
        elif verdict is Verdict.REBOOT_WORKER:
            self._reboot(worker, what)
        elif verdict is Verdict.RESTART_GROUP:
            self.log.info("%s; restarting the whole group (group restart %d of %d)", what, self.generation + 1,
                          self.config.max_restarts)
            self._restart_group(self.store.request_restart(self.generation))
        else:
            return self._give_up(what)
        return None

    def _no_blind_reboot(self, worker: Worker, code: int) -> str:
        """Why `worker`'s rank must not be started again alone now (empty: it may): its process could reach
        nothing of the job and the job's lists are still those it got, or it is in a restart loop
        (launch/restart_loop)."""
        worker.loop.ended(code, worker.lived_s(), worker.alone)
        if code == JOB_UNREACHABLE and worker.given is not None:
            now = self.starts.lists.refresh(self.config, self.store, self.generation)
            if now == worker.given:
                return (f"its process reached none of the job's stores or controllers ({describe(code)}), and the "
                        f"launchers' store names the same ones now: {now.describe()}")
            self.log.info("rank %d: its process reached none of the job's stores or controllers; the job's lists "
                          "changed since its start: %s", worker.rank, now.describe())
        return worker.loop.cause() if worker.loop.stuck() else ""

    def _reboot(self, worker: Worker, what: str) -> None:
        worker.reboots += 1
        pid = self.starts.start(worker, self.generation, restarted=True, alone=True)
        self.log.info("%s; worker reboot: rank %d started again alone as pid %d%s (MINDIO_RESTARTED=1, restart %d "
                      "of %d for this rank)", what, worker.rank, pid, ", a warm spare" if worker.warm else "",
                      worker.reboots, self.config.max_restarts)
        self.starts.refill_warm()

    def _hand_over(self, worker: Worker) -> None:
        """The process left its rank to a new one (a hot switch): started now, not counted as a restart; the
        old one is watched until it ends (launch/hand_overs)."""
        old = self.hand_overs.leave(worker)
        self._reported.add(old.pid)
        pid = self.starts.start(worker, self.generation, restarted=True, alone=True, reboot_type=hand_over.HOT_SWITCH)
        self.log.info("rank %d (local rank %d, pid %d) handed its rank over (hot switch); its new process is pid "
                      "%d%s (MINDIO_REBOOT_TYPE=%s, not counted against --max-restarts)", worker.rank,
                      worker.local_rank, old.pid, pid, ", a warm spare" if worker.warm else "", hand_over.HOT_SWITCH)
        self.starts.refill_warm()

    def _may_drain(self) -> bool:
        """This node may leave the job to a standby launcher that waits now; never node 0, which hosts the
        launchers' store and the leading controller (a backup controller's slot is re-hosted by the standby, as
        a lost node's)."""
        return self.config.node_rank > 0 and self.store.standby_waiting()

    def _drain(self, handed: List[Worker]) -> Outcome:
        """Every local rank was handed over and a standby waits: the node leaves the job to it, which takes its
        place as a lost node's; the old processes are then waited for (bounded), so that their exits are said."""
        for worker in handed:
            self._reported.add(self.hand_overs.leave(worker).pid)
        ranks = [w.rank for w in handed]
        self.log.info("node %d: every local rank %s was handed over (hot switch) and a standby launcher waits: "
                      "this node leaves the job to it (drain)", self.config.node_rank, ranks)
        self.drained = True
        self.store.drain()
        self.hand_overs.wait_for_the_leaving(KILL_WAIT_S)
        return Outcome(0, f"node {self.config.node_rank} drained: ranks {ranks} handed over to a standby launcher")

    def _give_up(self, what: str) -> Outcome:
        limit = f"--max-restarts {self.config.max_restarts}"
        self.log.info("%s; no restarts left (%s%s): stopping the job", what, limit,
                      ", per rank and for the group" if self.config.worker_reboot else "")
        self._stop(signal.SIGTERM, "no restarts left")
        self._publish_end(f"node {self.config.node_rank}: {what}, no restarts left ({limit})")
        return Outcome(1, f"job failed: {what}; no restarts left ({limit})")

    # --- stopping ------------------------------------------------------------------------------------------

    def _stop(self, sig: int, why: str) -> Dict[int, int]:
        """Stop every running local worker (sig, then SIGKILL after the grace); one line says how each ended.
        Returns {rank: return code} of those stopped and of those that had ended unanswered before."""
        # Workers that ended by themselves since the last check are named here too, or never.
        ended = {w.rank: w.poll() for w in self.workers if w.proc and not w.running() and w.pid not in self._reported}
        codes: Dict[int, int] = stop_all(self.workers, sig, self.config.shutdown_timeout)
        self._reported.update(w.pid for w in self.workers)
        if codes:
            self.log.info("stopped %d local worker%s (%s): %s", len(codes), "s" if len(codes) > 1 else "", why,
                          ", ".join(f"rank {rank} {describe(code)}" for rank, code in sorted(codes.items())))
        if ended:
            self.log.info("ended before the stop (%s): %s", why,
                          ", ".join(f"rank {rank} {describe(code)}" for rank, code in sorted(ended.items())))
        return {**ended, **codes}

    def _publish_end(self, reason: str) -> None:
        try:
            self.store.end(reason)
        except RuntimeError:  # node 0 is gone: nobody is left to tell
            pass
