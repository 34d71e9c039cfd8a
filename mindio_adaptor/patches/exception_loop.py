"""Megatron's train_step inside the reference's exception loop (`tft_exception_handler` semantics),
with --enable-high-availability: an exception is classified, reported to the controller, and the
training thread parks until the controller decides. The controller's STOP reaches every rank through
the processor thread (`stop_training`): it makes the training thread's pending collective fail
(core/comm_abort), so a rank whose peer died or hangs does not wait for the group timeout, and waits
until the training thread is parked. Only then may a saver touch the model and optimizer.

Decisions: EXIT (after a dump, or when nothing can be saved) ends the process with a message naming
the fault and the decision. RETRY comes after an online repair (patches/online_repair): training goes
on after the repair step, the last step some replica instance completed. A rank interrupted in the
step after it computes that step again, with the same micro-batches; any other rank enters
Megatron's train loop again (patches/train_reentry).
"""
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Tuple

from mindio_adaptor.core import comm_abort
from mindio_adaptor.core.exit_codes import CONTROLLER_LOST, ENDED_BY_CONTROLLER
from mindio_adaptor.core.env_values import seconds_from_env
from mindio_adaptor.core.hang_rule import limits_from_env
from mindio_adaptor.core.recovery_timeline import Timeline
from mindio_adaptor.patches import sections, signal_handler
from mindio_adaptor.patches.registry import Patch
from mindio_adaptor.patches.training import current_iteration
from mindio_adaptor.patches.training_state import STATE

logger = logging.getLogger(__name__)

STOP_TIMEOUT_ENV = "MINDIO_STOP_TIMEOUT_S"
DEFAULT_STOP_TIMEOUT_S = 30.0
HUNG_EXIT_GRACE_S = 2.0
# A link down this long is no blip: the processor's first reconnect attempts were refused or timed out.
TERM_GRACE_S = 2.0
DECISION_TIMEOUT_S = 30 * 60.0  # the reference's longest wait: a dump may take that long


class TrainingThread:
    """What the training thread and the processor thread tell each other during a recovery. Work on
    the model (a save, a repair) is handed to the parked training thread: device state (the current
    CUDA/NPU device, our CPU device layer's torch function mode) is per thread, and Megatron expects
    to run there."""

    def __init__(self):
        self.stop_requested = threading.Event()
        self.parked = threading.Event()
        self.jobs: "queue.Queue[Tuple[Callable[[], Any], Future]]" = queue.Queue()
        self.keep_ports: set = set()  # connections a stop must not break: store, controller
        self.backend = "gloo"

    def reset(self):
        """The training thread resumes training: the next stop starts from scratch."""
        self.stop_requested.clear()
        self.parked.clear()

    def run_parked(self, fn: Callable[[], Any], timeout: float) -> Any:
        """Run fn() on the training thread once it is parked; its result, or its exception, here."""
        if not self.parked.wait(stop_timeout_s()):
            raise RuntimeError("the training thread is not parked; refusing to touch a model it may still change")
        future: Future = Future()
        self.jobs.put((fn, future))
        return future.result(timeout)

    def run_jobs(self, wait_s: float) -> None:
        """On the training thread: run what the handlers posted, waiting up to wait_s for one."""
        try:
            fn, future = self.jobs.get(timeout=wait_s)
        except queue.Empty:
            return
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the handler, which reports it to the controller
                future.set_exception(exc)


TRAINING = TrainingThread()
TIMELINE = Timeline()


def dist_rank() -> int:
    return int(os.environ.get("RANK", "-1"))


def _end_recovery(outcome: str) -> None:
    recovery = TIMELINE.end(outcome)
    if recovery is not None:
        logger.info("%s", recovery.line(dist_rank()))


def stop_timeout_s() -> float:
    return seconds_from_env(STOP_TIMEOUT_ENV, DEFAULT_STOP_TIMEOUT_S, 1, 1800)


def arm(margs) -> None:
    """At connect: the hang rule's section limits and the exit handler. Read here so a bad value stops
    the start. Before anything is measured a section may take Megatron's collective timeout."""
    from mindio_adaptor.ttp import processor

    stop_timeout_s()
    sections.arm(limits_from_env(margs.distributed_timeout_minutes * 60.0), processor.section_link())
    processor.tft_register_exit_handler(_exit_even_if_hung)


def _exit_even_if_hung(ctx):
    """exit handler: a parked training thread exits by itself; a hung one cannot, so the process is
    ended shortly after the reply to the controller has gone out."""
    if TRAINING.parked.is_set():
        return 0

    def end():
        if not TRAINING.parked.is_set():
            logger.error("the controller ended the job and the training thread is hung: ending the process")
            logging.shutdown()
            os._exit(1)

    threading.Timer(HUNG_EXIT_GRACE_S, end).start()
    return 0


def stop_training(args, ctx):
    """The stop handler (processor thread): break the training thread out of its collective, then
    wait until it is parked. A training thread that does not park in time (hung in compute) makes
    this rank fail the action, so the controller never picks it to save."""
    TRAINING.stop_requested.set()
    what = comm_abort.break_collectives(TRAINING.backend, TRAINING.keep_ports)
    started = time.monotonic()
    limit = stop_timeout_s()
    if not TRAINING.parked.wait(limit):
        raise RuntimeError(f"the training thread did not stop within {limit:.0f} s ({STOP_TIMEOUT_ENV}); "
                           f"it is hung, this rank cannot save")
    logger.info("stopped: %s; training thread parked after %.2f s", what, time.monotonic() - started)
    TIMELINE.mark("stopped")
    return 0


def ha_enabled() -> bool:
    from megatron.training import global_vars

    # Read directly: get_args() asserts, and a DataLoader may start before Megatron parses its args.
    return bool(getattr(global_vars._GLOBAL_ARGS, "enable_high_availability", False))


def _train_step_in_exception_loop(wrapped, instance, args, kwargs):
    if not ha_enabled():
        return wrapped(*args, **kwargs)
    from mindio_adaptor.patches import online_repair, train_reentry
    from mindio_adaptor.ttp import processor

    train_reentry.first_step_started()
    step = current_iteration()
    if len(args) > 1:  # train_step(forward_step_func, data_iterator, ...): replayable for a recompute
        args = (args[0], online_repair.prepare_step(args[1], step), *args[2:])
    while True:
        try:
            with sections.timed("step"):
                result = wrapped(*args, **kwargs)
            _end_recovery("first step done")
            return result
        except Exception as exc:
            wait_for_decision(exc, step)  # returns only after an online repair
            TRAINING.reset()
            repair_step = processor.tft_get_repair_step()
            if repair_step == step:  # the other replica instance completed this step: go on after it
                raise train_reentry.ResumeTraining(repair_step, f"in step {step}, completed by the update "
                                                   f"of its replica peers; its loss, reduced for display "
                                                   f"only, is not printed") from exc
            if repair_step < step - 1:  # a checkpoint reloaded online: steps since it are computed again
                raise train_reentry.ResumeTraining(repair_step, f"in step {step}; back to the reloaded "
                                                   f"checkpoint") from exc
            if repair_step != step - 1:
                raise RuntimeError(f"step {step}: the controller's repair step {repair_step} is past this "
                                   f"step") from exc
            logger.info("step %d: recomputing after the online repair", step)


def _train_in_exception_loop(wrapped, instance, args, kwargs):
    """Megatron's train loop, entered again after an online repair when this rank does not recompute
    the interrupted step in place (patches/train_reentry): its own step was completed by the other
    replica instance, or it was stopped between two steps (the loop's own collectives: the
    exit-signal check, logging reductions, a periodic save)."""
    if not ha_enabled():
        return wrapped(*args, **kwargs)
    from mindio_adaptor.patches import process_replacement, train_reentry
    from mindio_adaptor.ttp import processor

    if process_replacement.is_replacement() and not process_replacement.REPLACEMENT.joined:
        process_replacement.join(args[4] if len(args) > 4 else kwargs.get("train_data_iterator"))
    while True:
        try:
            result = wrapped(*args, **kwargs)
        except train_reentry.ResumeTraining as resume:
            train_reentry.prepare(resume.step, f"interrupted {resume.where}")
            continue
        except Exception as exc:
            wait_for_decision(exc, current_iteration())  # returns only after an online repair
            TRAINING.reset()
            train_reentry.prepare(processor.tft_get_repair_step(), "stopped between two steps")
            continue
        if TIMELINE.recoveries:
            logger.info("%s", TIMELINE.summary(dist_rank()))
        return result


def wait_for_decision(exc: BaseException, step: int, replacement: bool = False):
    """Report the fault (or, in a replacement process, that it is ready), park, and end the process
    as the controller decides; returns after an online repair or a replacement's repair."""
    from mindio_adaptor.ttp import exception_handler, processor
    from mindio_adaptor.ttp.enums import Action, ReportState

    stopped = TRAINING.stop_requested.is_set()
    state = ReportState.NORMAL if stopped else exception_handler.classify(exc)[0]
    summary = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    TIMELINE.begin(step, "a replacement process joining" if replacement else
                   "stopped by the controller" if stopped else f"{state.name} fault")
    if replacement:
        logger.info("replacement process ready (reported as %s); waiting for the controller", state.name)
    elif stopped:
        logger.info("step %d: training stopped by the controller (%s)", step, summary)
    else:
        logger.error("step %d: training failed with %s; reported as %s", step, summary, state.name,
                     exc_info=exc)
    try:
        processor.tft_report_error(state, exception_handler.fault_code_of(exc))
    finally:
        TRAINING.parked.set()
    try:
        action = _serve_until_decision(processor)
    except (processor.ControllerUnreachable, TimeoutError) as lost:
        _end_recovery("controller lost")
        logger.error("step %d: %s. Without the controller no rank can be repaired and no dying-gasp "
                     "checkpoint can be agreed on: this rank exits (code %d) after %s; the job resumes "
                     "from its last complete checkpoint", step, lost, CONTROLLER_LOST, summary)
        raise SystemExit(CONTROLLER_LOST) from exc
    decision = f"{processor.tft_get_repair_type() or 'exit'} at step {processor.tft_get_repair_step()}"
    for hook in list(STATE.decided):
        hook(action == Action.RETRY)
    if action == Action.RETRY:
        logger.info("step %d: online repair done (%s)", step, decision)
        TIMELINE.mark("resumed")
        return
    _end_recovery(f"job ended by the controller ({decision})")
    logger.error("step %d: training ended by the recovery controller (%s) after %s; exit code %d", step,
                 decision, summary, ENDED_BY_CONTROLLER)
    raise SystemExit(ENDED_BY_CONTROLLER) from exc


def _serve_until_decision(processor):
    """Park: run the handlers' jobs until the controller's decision arrives (bounded). An exception
    while parked (a DataLoader worker ended by the launcher's SIGTERM raises one here) changes
    nothing: this rank has already reported. A SIGTERM while the controller is unreachable ends the
    wait: the launcher stops the job (torchrun does when a rank dies, the controller's host among
    them), and nothing can be agreed on without the controller."""
    deadline = time.monotonic() + DECISION_TIMEOUT_S
    unreachable_since = None
    while True:
        try:
            TRAINING.run_jobs(0.1)
            return processor.tft_wait_next_action(timeout=0.1)
        except TimeoutError:
            pass
        except processor.ControllerUnreachable:
            raise
        except Exception as exc:
            logger.warning("while waiting for the controller: %s: %s", type(exc).__name__, exc)
        now = time.monotonic()
        unreachable_since = None if processor.controller_connected() else unreachable_since or now
        if signal_handler.TERMINATION.is_set() and unreachable_since and now - unreachable_since > TERM_GRACE_S:
            raise processor.ControllerUnreachable(
                f"the launcher asked this process to stop (SIGTERM) and the controller has been unreachable "
                f"for {now - unreachable_since:.1f} s (reconnecting)")
        if now > deadline:
            raise TimeoutError(f"no decision from the controller within {DECISION_TIMEOUT_S:.0f} s")


PATCHES = [
    Patch("megatron.training.training", "train_step", _train_step_in_exception_loop),
    Patch("megatron.training.training", "train", _train_in_exception_loop),
]
