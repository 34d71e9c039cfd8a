"""Exit codes with a meaning shared by the training processes and the launcher.

ENDED_BY_CONTROLLER: a training process exits with it when the recovery controller decided that the job
ends (for example after the dying-gasp checkpoint was written). The launcher (`mindio-adaptor launch`)
must tell such a decided end from a crash: a crash is answered by starting the process again, a decided
end never is, and once one process ended this way the launcher restarts nothing else on its node (the
others are expected to follow). A distinct code is the only channel a dead process leaves behind, so it
must not collide with what crashes produce: 1 (an uncaught Python exception), 2 (argparse), 128+N and
negative codes (signals), 137 and 143 (SIGKILL, SIGTERM through a shell). 86 is none of those and is not
used by Python, torch or the shells; the launcher itself also exits with it, so a job manager can tell
"resume from the checkpoint" from "the job crashed".
"""
import signal

ENDED_BY_CONTROLLER = 86
# A live rank that a scale-in (elastic training) dropped with its data-parallel slice, which lost a rank: it
# left the job on purpose, and the job goes on without it (core/detection/leaving_rank). The launcher does not start
# it again (nothing is left for it to join) and does not end the job for it. 87: as 86, none of the
# codes crashes produce.
LEFT_THE_JOB = 87
# A rank that lost the controller while it waited for a decision: nothing was decided, so it ends like a
# crash (the launcher may start it again, the job resumes from its last complete checkpoint).
CONTROLLER_LOST = 1
# A replacement process (worker reboot) that reached none of the job's stores, or none of its controllers,
# during its start: nothing to join with the addresses it was given (core/job/unreachable_job). Also a rank cut
# off from the job: it lost the leader with no proof that its process is gone, and the ranks that reached a
# backup were a minority (core/detection/cut_off; docs/controller.md): the leader may lead the others, who replace it.
# Its launcher starts it again only once the job's lists changed (a lost node re-hosted its slot), never with
# the same ones: it would fail the same way. 88: as 86 and 87, none of the codes crashes produce.
JOB_UNREACHABLE = 88


def describe(returncode: int) -> str:
    """How a process ended, in words, from a subprocess return code (negative: killed by that signal)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"signal {name}"
    if returncode == ENDED_BY_CONTROLLER:
        return f"exit code {returncode} (ENDED_BY_CONTROLLER)"
    if returncode == LEFT_THE_JOB:
        return f"exit code {returncode} (LEFT_THE_JOB)"
    if returncode == JOB_UNREACHABLE:
        return f"exit code {returncode} (JOB_UNREACHABLE)"
    return f"exit code {returncode}"
