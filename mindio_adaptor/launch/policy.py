"""What the launcher does when a worker exits: a pure decision, so the rules read in one place and are
tested without processes."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mindio_adaptor.core.detection.exit_codes import ENDED_BY_CONTROLLER, LEFT_THE_JOB


@dataclass
class Outcome:
    """How a node's launcher ends: its exit code and the summary's words."""

    code: int
    what: str


class Verdict(Enum):
    DONE = "done"  # the worker finished (exit 0), or nothing may be restarted any more: keep watching
    ENDED = "ended"  # the recovery controller ended the job: restart nothing from now on
    LEFT = "left"  # the rank left a job that goes on without it (a scale-in dropped it): not restarted
    REBOOT_WORKER = "reboot worker"  # start this rank again alone
    RESTART_GROUP = "restart group"  # stop every worker, start the whole group again (torchrun)
    GIVE_UP = "give up"  # no restarts left: stop everything, the launcher fails


def on_exit(returncode: int, *, worker_reboot: bool, ended: bool, rank_reboots: int, group_restarts: int,
            max_restarts: int, peers_running: bool = True, reboots_stopped: bool = False) -> Verdict:
    """`rank_reboots`: how often this rank was already started again alone; `group_restarts`: how often the
    whole group was. Both count against --max-restarts separately: a rank that used up its own reboots falls
    back to the torchrun behaviour (a group restart while those remain). `peers_running`: some other worker
    of the job may still run; a worker started again alone needs survivors to meet, so without any, the
    group is started again instead. `reboots_stopped`: the rank must not be started again alone now (a restart
    loop, or a process that reached nothing of the job: launch/restart_loop), as if its reboots were used up."""
    if returncode == 0:
        return Verdict.DONE
    if returncode == ENDED_BY_CONTROLLER:
        return Verdict.ENDED
    if returncode == LEFT_THE_JOB:
        return Verdict.LEFT
    if ended:
        return Verdict.DONE  # after a decided end, a failing process is expected; never restarted
    if worker_reboot and peers_running and rank_reboots < max_restarts and not reboots_stopped:
        return Verdict.REBOOT_WORKER
    if group_restarts < max_restarts:
        return Verdict.RESTART_GROUP
    return Verdict.GIVE_UP
