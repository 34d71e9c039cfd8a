"""Megatron's train_step and train inside the reference's exception loop (`tft_exception_handler`
semantics), with --enable-high-availability: an exception is reported to the controller and the
training thread parks until the controller decides (recovery/decision_wait); the recovery's stages run
on it meanwhile (recovery/flows).

RETRY comes after an online repair: training goes on after the repair step, the last step some replica
instance completed. A rank interrupted in the step after it computes that step again, with the same
micro-batches; any other rank enters Megatron's train loop again (patches/train_reentry).
"""
import logging

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.detection.hang_rule import limits_from_env
from mindio_adaptor.core.job.recovery_limits import stop_timeout_s
from mindio_adaptor.core.steps.step_path_costs import COSTS
from mindio_adaptor.megatron.call_arguments import argument
from mindio_adaptor.patches import client_loop, sections
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.patches.process_replacement import is_replacement
from mindio_adaptor.recovery import decision_wait, step_replay, train_reentry
from mindio_adaptor.recovery.fault_handling import client_handles_faults
from mindio_adaptor.recovery.replacement_join import join_as_replacement
from mindio_adaptor.recovery.resumption import NextMove
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


def arm(margs, link) -> None:
    """At connect: the hang rule's section limits. Read here so a bad value stops the start. Before
    anything is measured a section may take Megatron's collective timeout."""
    stop_timeout_s()
    sections.arm(limits_from_env(margs.distributed_timeout_minutes * 60.0), link.sections())


def ha_enabled() -> bool:
    return SESSION.config.enable_high_availability


def adaptor_handles_faults() -> bool:
    """High availability on, and no client of the reference API handling faults (recovery/fault_handling)."""
    return ha_enabled() and not client_handles_faults()


def _train_step_in_exception_loop(wrapped, instance, args, kwargs):
    if not ha_enabled():
        return wrapped(*args, **kwargs)
    if client_handles_faults():
        return client_loop.train_step(wrapped, args, kwargs)
    preparing = COSTS.clock()
    train_reentry.first_step_started(SESSION)
    step = megatron_job.current_iteration()
    if len(args) > 1:  # train_step(forward_step_func, data_iterator, ...): replayable for a recompute
        args = (args[0], step_replay.prepare_step(SESSION, megatron_job, args[1], step), *args[2:])
    COSTS.add("step replay", COSTS.clock() - preparing)
    while True:
        try:
            with sections.timed("step"):
                result = wrapped(*args, **kwargs)
            decision_wait.end_recovery(SESSION, "first step done")
            return result
        except Exception as exc:
            decision = decision_wait.wait_for_decision(SESSION, exc, step)  # returns only after a repair
            SESSION.thread.reset()
            if decision.next_move(step) == NextMove.RECOMPUTE:
                logger.info("step %d: recomputing after the online repair", step)
                continue
            where = (f"in step {step}; back to the reloaded checkpoint" if decision.flow == "reload" else
                     f"in step {step}; the job changed its data-parallel size ({decision.flow})"
                     if decision.flow in ("scale_in", "scale_out") else
                     f"in step {step}, completed by the update of its replica peers; its loss line is printed "
                     f"at the rollback")
            raise train_reentry.ResumeTraining(decision.repair_step, where) from exc


def _train_in_exception_loop(wrapped, instance, args, kwargs):
    """Megatron's train loop, entered again after an online repair when this rank does not recompute
    the interrupted step in place (patches/train_reentry): its own step was completed by the other
    replica instance, or it was stopped between two steps (the loop's own collectives: the
    exit-signal check, logging reductions, a periodic save)."""
    if not ha_enabled():
        return wrapped(*args, **kwargs)
    SESSION.job.valid_data_iterator = argument(wrapped, args, kwargs, "valid_data_iterator")
    if client_handles_faults():
        return client_loop.train(wrapped, args, kwargs)
    if is_replacement() and not SESSION.replacement.joined:
        join_as_replacement(SESSION, args[4] if len(args) > 4 else kwargs.get("train_data_iterator"))
    while True:
        try:
            result = wrapped(*args, **kwargs)
        except train_reentry.ResumeTraining as resume:
            train_reentry.prepare(SESSION, megatron_job, resume.step, f"interrupted {resume.where}")
            continue
        except Exception as exc:
            decision = decision_wait.wait_for_decision(SESSION, exc, megatron_job.current_iteration())
            SESSION.thread.reset()
            train_reentry.prepare(SESSION, megatron_job, decision.repair_step, "stopped between two steps")
            continue
        if SESSION.timeline.recoveries:
            logger.info("%s", SESSION.timeline.summary(decision_wait.dist_rank()))
        return result


PATCHES = [
    Patch("megatron.training.training", "train_step", _train_step_in_exception_loop),
    Patch("megatron.training.training", "train", _train_in_exception_loop),
]
