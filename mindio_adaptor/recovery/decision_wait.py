"""A rank that failed, was stopped, or joins as a replacement reports to the controller and parks: its
training thread runs the recovery stages the processor posts (core/process/training_thread) until the
controller's decision arrives. RETRY returns (training goes on after the repair step); any other
decision ends the process with a message naming the fault and the decision. A rank that a scale-in
dropped leaves without a decision (core/detection/leaving_rank)."""
import logging
import os
import time

from mindio_adaptor.core.detection import cut_off, faults
from mindio_adaptor.core.detection.enums import ReportState
from mindio_adaptor.core.detection.exit_codes import CONTROLLER_LOST, ENDED_BY_CONTROLLER, JOB_UNREACHABLE, LEFT_THE_JOB
from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob
from mindio_adaptor.core.job import hand_over, processor_link
from mindio_adaptor.core.job.processor_link import ControllerUnreachable, CutOffFromTheJob
from mindio_adaptor.core.job.recovery_limits import DECISION_TIMEOUT_S
from mindio_adaptor.recovery.resumption import Resumption

logger = logging.getLogger(__name__)

# The strategy of the EXIT a controller sends a returned process when the scale-out does not happen.
SENT_AWAY_STRATEGY = "scale_out"
# The strategy of the EXIT a controller sends a rank it hands over to a new process (a hot switch).
HANDED_OVER_STRATEGY = "hot_switch"
# A link down this long is no blip: the processor's first reconnect attempts were refused or timed out.
TERM_GRACE_S = 2.0


def dist_rank() -> int:
    return int(os.environ.get("RANK", "-1"))


def end_recovery(session, outcome: str) -> None:
    recovery = session.timeline.end(outcome)
    if recovery is not None:
        logger.info("%s", recovery.line(dist_rank()))


def wait_for_decision(session, exc: BaseException, step: int, replacement: bool = False) -> Resumption:
    """Report the fault (or, in a replacement process, that it is ready), park, and end the process
    as the controller decides; returns the decision after an online repair or a replacement's repair."""
    link = processor_link.current()
    # NORMAL: stopped on purpose, also where the controller's PRELOCK raised FORCE STOP before its STOP came
    # (a pause or a hot switch releases the held ranks that way)
    stopped = session.thread.stop_requested.is_set() or faults.report_state_of(exc) == ReportState.NORMAL
    state = ReportState.NORMAL if stopped else faults.report_state_of(exc)
    summary = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    session.timeline.begin(step, "a replacement process joining" if replacement else
                           "stopped by the controller" if stopped else f"{state.name} fault")
    if replacement:
        logger.info("replacement process ready (reported as %s); waiting for the controller", state.name)
    elif stopped:
        logger.info("step %d: training stopped by the controller (%s)", step, summary)
    else:
        logger.error("step %d: training failed with %s; reported as %s", step, summary, state.name,
                     exc_info=exc)
    try:
        link.report_fault(state, faults.fault_code_of(exc))
    finally:
        session.thread.parked.set()
    try:
        verdict = link.await_decision(DECISION_TIMEOUT_S, between=_parked_work(session, link),
                                      wake=session.thread.wake)
    except LeavingTheJob as leaving:
        end_recovery(session, "left the job")
        logger.warning("%s; this process exits (code %d, LEFT_THE_JOB: not restarted, the job goes on)", leaving,
                       LEFT_THE_JOB)
        raise SystemExit(LEFT_THE_JOB) from None
    except CutOffFromTheJob as minority:
        end_recovery(session, "cut off from the job")
        cut_off.leave(f"rank {dist_rank()} (step {step})", minority.reason)
        raise SystemExit(JOB_UNREACHABLE) from None  # not reached: leave() ends the process
    except (ControllerUnreachable, TimeoutError) as lost:
        end_recovery(session, "controller lost")
        logger.error("step %d: %s. Without the controller no rank can be repaired and no dying-gasp "
                     "checkpoint can be agreed on: this rank exits (code %d) after %s; the job resumes "
                     "from its last complete checkpoint", step, lost, CONTROLLER_LOST, summary)
        raise SystemExit(CONTROLLER_LOST) from exc
    if replacement and not verdict.go_on and verdict.strategy == SENT_AWAY_STRATEGY:
        _leave_as_sent_away(session)
    if not verdict.go_on and verdict.strategy == HANDED_OVER_STRATEGY:
        _leave_handed_over(session, verdict.repair_step, verdict.ranks)
    decision = f"{verdict.strategy or 'exit'} at step {verdict.repair_step}"
    for hook in list(session.job.decided):
        hook(verdict.go_on)
    if verdict.go_on:
        logger.info("step %d: online repair done (%s)", step, decision)
        session.timeline.mark("resumed")
        return Resumption(verdict.strategy, verdict.repair_step, session.flow or "retry")
    end_recovery(session, f"job ended by the controller ({decision})")
    logger.error("step %d: training ended by the recovery controller (%s) after %s; exit code %d", step,
                 decision, summary, ENDED_BY_CONTROLLER)
    raise SystemExit(ENDED_BY_CONTROLLER) from exc


def _leave_as_sent_away(session) -> None:
    """A process that returned for a rank a scale-in retired, told to exit because not every retired rank
    returned in time: the job goes on at its smaller size without it, so it leaves (not 86, which tells every
    launcher that the job ended)."""
    end_recovery(session, "sent away: no scale-out")
    logger.warning("elastic training: this returned process is sent away: not every rank the scale-in retired "
                   "returned within MINDIO_SCALE_OUT_WAIT_S, and the job goes on at its smaller size; this process "
                   "exits (code %d, LEFT_THE_JOB: not restarted)", LEFT_THE_JOB)
    raise SystemExit(LEFT_THE_JOB)


def _leave_handed_over(session, step: int, switched) -> None:
    """This rank was handed over to a new process (a hot switch of the ranks `switched`) after `step`, with
    every rank holding there: the process leaves cleanly (exit 0), its mark telling its launcher to start the
    new one (core/job/hand_over)."""
    end_recovery(session, "handed over (hot switch)")
    mark = hand_over.mark_handed_over(switched)
    if mark:
        logger.info("hot switch: this rank is handed over to a new process after step %d; this process exits 0 "
                    "(its launcher starts the new one)", step)
        raise SystemExit(0)
    logger.error("hot switch: this rank is handed over after step %d, but no launcher of ours started this process "
                 "(%s is not set): nothing will start its new process; exit code 1, so that a launcher that "
                 "restarts failed processes does", step, hand_over.ENV_HANDOVER_DIR)
    raise SystemExit(1)


def _parked_work(session, link):
    """What a parked rank does while it waits for the decision: run the stages' jobs, in one wait that a job
    or the decision ends (the link's wake). An
    exception among them (a DataLoader worker ended by the launcher's SIGTERM raises one here)
    changes nothing: this rank has already reported. A SIGTERM while the controller is unreachable
    ends the wait: the launcher stops the job (torchrun does when a rank dies, the controller's host
    among them), and nothing can be agreed on without the controller."""
    unreachable_since = None

    def work() -> None:
        nonlocal unreachable_since
        try:
            session.thread.run_jobs()
        except Exception as exc:
            logger.warning("while waiting for the controller: %s: %s", type(exc).__name__, exc)
        if session.leaving:  # the controller was told with REBUILD_GROUP's reply; it sends this rank nothing more
            raise LeavingTheJob(session.leaving)
        now = time.monotonic()
        unreachable_since = None if link.connected() else unreachable_since or now
        if session.termination.is_set() and unreachable_since and now - unreachable_since > TERM_GRACE_S:
            raise ControllerUnreachable(
                f"the launcher asked this process to stop (SIGTERM) and the controller has been unreachable "
                f"for {now - unreachable_since:.1f} s (reconnecting)")

    return work
