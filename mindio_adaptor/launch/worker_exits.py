"""What a node's launcher does when one of its workers' processes ends (policy.on_exit decides, this acts):
start the rank again alone, restart the group, take the end the controller decided, let a rank that left
the job go, or give up; and the hot switch's hand-overs, a drained node's included (launch/hand_overs).
The launcher (launch/agent.NodeAgent) is the host: its state and its group restart, stop and end."""
from __future__ import annotations

import signal
from typing import List, Optional

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, JOB_UNREACHABLE, LEFT_THE_JOB, describe
from mindio_adaptor.core.job import hand_over
from mindio_adaptor.launch.policy import Outcome, Verdict, on_exit
from mindio_adaptor.launch.worker import KILL_WAIT_S, Worker


class WorkerExits:
    def __init__(self, host):
        # The host's parts, set once; its state (ended, generation, drained) is read and written on it.
        self.host, self.config, self.store, self.log = host, host.config, host.store, host.log
        self.workers, self.starts, self.hand_overs = host.workers, host.starts, host.hand_overs
        self.job_controllers = host.job_controllers

    def check(self) -> Optional[Outcome]:
        handed, drained = self.hand_overs.ready(self.workers, self.may_drain)
        if drained:
            return self.drain(handed)
        for worker in handed:
            self.hand_over(worker)
        self.hand_overs.reap()
        for worker, code in self.workers.unanswered_exits():
            outcome = self.answer(worker, code)
            if outcome:
                return outcome
        return None

    def answer(self, worker: Worker, code: int) -> Optional[Outcome]:
        what = f"rank {worker.rank} (local rank {worker.local_rank}, pid {worker.pid}) ended: {describe(code)}"
        # A rank that exited LEFT_THE_JOB was retired by the controller before it exited: nothing to tell.
        had_left = (code not in (0, ENDED_BY_CONTROLLER, LEFT_THE_JOB)
                    and self.job_controllers.process_ended(worker, code))
        leftovers = worker.end_leftovers()
        if leftovers:
            self.log.info("rank %d: ended what its process left running in its process group: pids %s",
                          worker.rank, leftovers)
        if had_left:  # its training was over: a process started again would find no job to join
            self.workers.ended_after_leaving[worker.rank] = code
            self.log.info("%s after it had left the job (its training was over): not restarted", what)
            return None
        if code not in (0, ENDED_BY_CONTROLLER) and self.host.follow_generation():
            self.log.info("%s, during another node's group restart", what)
            return None
        # Other nodes' workers are out of sight: assume they run (a launcher per node sees only its own).
        peers_running = self.config.nnodes > 1 or any(w.running() for w in self.workers if w is not worker)
        no_reboot = self.no_blind_reboot(worker, code)
        verdict = on_exit(code, worker_reboot=self.config.worker_reboot, ended=self.host.ended,
                          rank_reboots=worker.reboots, group_restarts=self.host.generation,
                          max_restarts=self.config.max_restarts, peers_running=peers_running,
                          reboots_stopped=bool(no_reboot))
        if no_reboot and verdict in (Verdict.RESTART_GROUP, Verdict.GIVE_UP):
            self.log.info("rank %d: no more reboots of this rank: %s", worker.rank, no_reboot)
        if verdict is Verdict.DONE:
            self.log.info("%s%s", what, "; not restarted: the recovery controller ended the job" if code else "")
        elif verdict is Verdict.ENDED:
            self.host.ended = True
            self.store.mark_controller_end()
            self.log.info("%s: the recovery controller ended the job; nothing is restarted from now on", what)
        elif verdict is Verdict.LEFT:
            self.workers.left_the_job.append(worker.rank)
            self.log.info("%s: it left the job, which goes on without it (a scale-in dropped its data-parallel "
                          "slice); not restarted", what)
        elif verdict is Verdict.REBOOT_WORKER:
            self.reboot(worker, what)
        elif verdict is Verdict.RESTART_GROUP:
            self.log.info("%s; restarting the whole group (group restart %d of %d)", what, self.host.generation + 1,
                          self.config.max_restarts)
            self.host.restart_group(self.store.request_restart(self.host.generation))
        else:
            return self.give_up(what)
        return None

    def no_blind_reboot(self, worker: Worker, code: int) -> str:
        """Why `worker`'s rank must not be started again alone now (empty: it may): its process could reach
        nothing of the job and the job's lists are still those it got, or it is in a restart loop
        (launch/restart_loop)."""
        worker.loop.ended(code, worker.lived_s(), worker.alone)
        if code == JOB_UNREACHABLE and worker.given is not None:
            now = self.starts.lists.refresh(self.config, self.store, self.host.generation)
            if now == worker.given:
                return (f"its process reached none of the job's stores or controllers ({describe(code)}), and the "
                        f"launchers' store names the same ones now: {now.describe()}")
            self.log.info("rank %d: its process reached none of the job's stores or controllers; the job's lists "
                          "changed since its start: %s", worker.rank, now.describe())
        return worker.loop.cause() if worker.loop.stuck() else ""

    def reboot(self, worker: Worker, what: str) -> None:
        worker.reboots += 1
        pid = self.starts.start(worker, self.host.generation, restarted=True, alone=True)
        self.log.info("%s; worker reboot: rank %d started again alone as pid %d%s (MINDIO_RESTARTED=1, restart %d "
                      "of %d for this rank)", what, worker.rank, pid, ", a warm spare" if worker.warm else "",
                      worker.reboots, self.config.max_restarts)
        self.starts.refill_warm()

    def hand_over(self, worker: Worker) -> None:
        """The process left its rank to a new one (a hot switch): started now, not counted as a restart; the
        old one is watched until it ends (launch/hand_overs)."""
        old = self.hand_overs.leave(worker)
        self.workers.answered.add(old.pid)
        pid = self.starts.start(worker, self.host.generation, restarted=True, alone=True,
                                reboot_type=hand_over.HOT_SWITCH)
        self.log.info("rank %d (local rank %d, pid %d) handed its rank over (hot switch); its new process is pid "
                      "%d%s (MINDIO_REBOOT_TYPE=%s, not counted against --max-restarts)", worker.rank,
                      worker.local_rank, old.pid, pid, ", a warm spare" if worker.warm else "", hand_over.HOT_SWITCH)
        self.starts.refill_warm()

    def may_drain(self) -> bool:
        """This node may leave the job to a standby launcher that waits now; never node 0, which hosts the
        launchers' store and the leading controller (a backup controller's slot is re-hosted by the standby, as
        a lost node's)."""
        return self.config.node_rank > 0 and self.store.standby_waiting()

    def drain(self, handed: List[Worker]) -> Outcome:
        """Every local rank was handed over and a standby waits: the node leaves the job to it, which takes its
        place as a lost node's; the old processes are then waited for (bounded), so that their exits are said."""
        for worker in handed:
            self.workers.answered.add(self.hand_overs.leave(worker).pid)
        ranks = [w.rank for w in handed]
        self.log.info("node %d: every local rank %s was handed over (hot switch) and a standby launcher waits: "
                      "this node leaves the job to it (drain)", self.config.node_rank, ranks)
        self.host.drained = True
        self.store.drain()
        self.hand_overs.wait_for_the_leaving(KILL_WAIT_S)
        return Outcome(0, f"node {self.config.node_rank} drained: ranks {ranks} handed over to a standby launcher")

    def give_up(self, what: str) -> Outcome:
        limit = f"--max-restarts {self.config.max_restarts}"
        self.log.info("%s; no restarts left (%s%s): stopping the job", what, limit,
                      ", per rank and for the group" if self.config.worker_reboot else "")
        self.host.stop(signal.SIGTERM, "no restarts left")
        self.host.publish_end(f"node {self.config.node_rank}: {what}, no restarts left ({limit})")
        return Outcome(1, f"job failed: {what}; no restarts left ({limit})")
