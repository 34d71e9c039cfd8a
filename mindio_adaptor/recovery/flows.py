"""The recovery flows on the rank's side: for each strategy the controller can decide, the stages each
of its actions runs, in order. This table is the only place that knows the order; the stages
(recovery/stages) know only their own work.

The controller drives a flow action by action (csrc/controller): STOP on every live rank, then
  retry    (online repair)        CLEAN, REPAIR, ROLLBACK, then training goes on (RETRY)
  reload   (retry without a live replica holding a faulty rank's shard: the last checkpoint
            is loaded again online; the controller says so in REPAIR's repair type)
  recover  (process replacement)  CLEAN, REBUILD_GROUP once the replacement has joined, REPAIR, ROLLBACK
  hot_switch (a live rank handed over to a new process, every rank holding after one step) as
            recover; the leaving rank exits after CLEAN (EXIT, recovery/decision_wait)
  dump     (dying-gasp checkpoint) SAVE_CKPT on the savers, RENAME on one of them, EXIT
  scale_in (elastic training: a recover whose replacement never came) SAVE_CKPT and RENAME (the
            dump, with --elastic-scale-in-from checkpoint; nothing from the replicas), then REBUILD_GROUP
            among the survivors at the smaller data-parallel size, REPAIR (the state resharded in memory,
            or that checkpoint loaded at the new size), ROLLBACK, and training goes on
  scale_out (elastic training: the ranks a scale-in retired returned) CLEAN (the survivors' groups),
            SAVE_CKPT (with --elastic-scale-out-from checkpoint: the survivors save the repair step at the
            smaller size and publish it), then with the returned processes REBUILD_GROUP at the original
            size, REPAIR (the state from the replicas, or that checkpoint loaded), ROLLBACK, and training
            goes on
  exit                             EXIT
and EXIT ends any of them. The processor link's actions (core/job/processor_link) are answered here: each
becomes this rank's RecoveryActions, whose stages come from the table and run where they must run (the
parked training thread, or the processor's thread).
"""
import logging
from typing import Dict, List, Optional, Tuple

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.detection.enums import RepairType
from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob
from mindio_adaptor.core.job.processor_link import LEAVES_THE_JOB, ControllerAction, RepairAssignment
from mindio_adaptor.core.job.recovery_limits import STAGE_TIMEOUT_S, stop_timeout_s
from mindio_adaptor.recovery.stages.drop_gradients import DROP_GRADIENTS
from mindio_adaptor.recovery.stages.end_if_hung import END_IF_HUNG
from mindio_adaptor.recovery.stages.injected_fault import REPAIR_FAULT_POINT
from mindio_adaptor.recovery.stages.log_repair_step import LOG_REPAIR_STEP
from mindio_adaptor.recovery.stages.publish_dump import PUBLISH_DUMP
from mindio_adaptor.recovery.stages.rebuild_groups import REBUILD_GROUPS
from mindio_adaptor.recovery.stages.reload_checkpoint import RELOAD_CHECKPOINT
from mindio_adaptor.recovery.stages.repair_from_peer import REPAIR_FROM_PEER
from mindio_adaptor.recovery.stages.roll_back import ROLL_BACK
from mindio_adaptor.recovery.stages.save_dump import SAVE_DUMP
from mindio_adaptor.recovery.stages.save_repair_step import SAVE_REPAIR_STEP
from mindio_adaptor.recovery.stages.scale_in_groups import SCALE_IN_GROUPS
from mindio_adaptor.recovery.stages.scale_in_save import SCALE_IN_PUBLISH, SCALE_IN_SAVE
from mindio_adaptor.recovery.stages.scale_in_state import SCALE_IN_STATE
from mindio_adaptor.recovery.stages.scale_out_groups import SCALE_OUT_GROUPS
from mindio_adaptor.recovery.stages.scale_out_save import SCALE_OUT_SAVE
from mindio_adaptor.recovery.stages.scale_out_state import SCALE_OUT_STATE
from mindio_adaptor.recovery.stages.stage import RecoveryAction, Stage
from mindio_adaptor.recovery.stages.stop import STOP

logger = logging.getLogger(__name__)

Flow = Dict[str, Tuple[Stage, ...]]  # action name -> its stages, in order

# Back to the repair step, its loss line where owed, its periodic checkpoint where owed: alike in every flow
ROLLBACK = (ROLL_BACK, LOG_REPAIR_STEP, SAVE_REPAIR_STEP)

RECOVER: Flow = {"stop": (STOP,), "clean": (REPAIR_FAULT_POINT, DROP_GRADIENTS), "rebuild_group": (REBUILD_GROUPS,),
                 "repair": (REPAIR_FROM_PEER,), "rollback": ROLLBACK, "exit": (END_IF_HUNG,)}

FLOWS: Dict[str, Flow] = {
    "retry": {"stop": (STOP,), "clean": (REPAIR_FAULT_POINT, REBUILD_GROUPS), "repair": (REPAIR_FROM_PEER,),
              "rollback": ROLLBACK, "exit": (END_IF_HUNG,)},
    "reload": {"stop": (STOP,), "clean": (REPAIR_FAULT_POINT, REBUILD_GROUPS), "repair": (RELOAD_CHECKPOINT,),
               "rollback": ROLLBACK, "exit": (END_IF_HUNG,)},
    "recover": RECOVER,
    "hot_switch": RECOVER,
    "dump": {"stop": (STOP,), "save_ckpt": (SAVE_DUMP,), "rename": (PUBLISH_DUMP,), "exit": (END_IF_HUNG,)},
    "scale_in": {"stop": (STOP,), "save_ckpt": (SCALE_IN_SAVE,), "rename": (SCALE_IN_PUBLISH,),
                 "rebuild_group": (SCALE_IN_GROUPS,), "repair": (SCALE_IN_STATE,),
                 "rollback": ROLLBACK, "exit": (END_IF_HUNG,)},
    "scale_out": {"stop": (STOP,), "clean": (REBUILD_GROUPS,), "save_ckpt": (SCALE_OUT_SAVE,),
                  "rebuild_group": (SCALE_OUT_GROUPS,), "repair": (SCALE_OUT_STATE,),
                  "rollback": ROLLBACK, "exit": (END_IF_HUNG,)},
    "exit": {"stop": (STOP,), "exit": (END_IF_HUNG,)},
    "none": {"stop": (STOP,), "exit": (END_IF_HUNG,)},  # an action before any decision
}


class NoSuchStep(RuntimeError):
    """The controller sent an action its decided flow does not have."""


def flow_of(strategy: str, repair: Optional[RepairAssignment] = None) -> str:
    """The flow an action belongs to: the controller's strategy, except that a repair from the last
    checkpoint (repair type LOAD_CKPT) is the reload flow."""
    if strategy == "retry" and repair is not None and repair.repair_type == RepairType.LOAD_CKPT:
        return "reload"
    return strategy


def stages_of(action: RecoveryAction) -> Tuple[Stage, ...]:
    flow = flow_of(action.strategy, action.repair)
    if flow not in FLOWS:
        raise NoSuchStep(f"{action.name}: the controller's strategy is {action.strategy!r}, which has no flow "
                         f"here (known: {', '.join(FLOWS)})")
    stages = FLOWS[flow].get(action.name)
    if stages is None:
        raise NoSuchStep(f"{action.name} is not a step of the {flow} flow ({', '.join(FLOWS[flow])})")
    return stages


def note_flow(session, action: RecoveryAction) -> None:
    """The flow of the recovery under way: a STOP (or the first action a replacement sees) names it, and
    a repair from the last checkpoint makes it the reload flow for the actions after it."""
    flow = flow_of(action.strategy, action.repair)
    # A scale-in follows a recover whose replacement never came: its first action is no STOP. A process
    # returned for a scale-out sees REBUILD_GROUP first.
    if action.name == "stop" or session.flow is None or flow in ("reload", "scale_in", "scale_out"):
        session.flow = flow


class AfterScaleIn(RuntimeError):
    """A recovery after a scale-in other than the dump: not carried out at the smaller size."""


# The flows a scaled-in rank takes part in: the resizes, and the dump of the smaller job (the controller
# decides nothing else while scaled in, csrc/controller Controller::caps_now_locked).
WHILE_SCALED_IN = ("scale_in", "scale_out", "dump")
# What a rank may still do in any other flow once the job scaled in: stop, and end.
AFTER_A_SCALE_IN = ("stop", "exit")


def refuse_after_scale_in(session, action: RecoveryAction) -> None:
    """An online repair or a process replacement at the smaller size is not built (docs/elastic.md): a
    controller that asks for one (an older one, or a cluster manager's choice) is refused; it falls back
    to the dump."""
    if session.scale_in is not None and session.flow not in WHILE_SCALED_IN and \
            action.name not in AFTER_A_SCALE_IN:
        raise AfterScaleIn(f"{action.name} ({action.strategy}): a recovery after a scale-in "
                           f"({session.scale_in.describe()}) other than the dump is not supported yet; the job "
                           f"ends, and resumes from its last checkpoint")


def run_action(session, megatron, action: RecoveryAction) -> int:
    """Every stage of the action, in order; a stage that raises ends the action with its error."""
    stages = stages_of(action)
    note_flow(session, action)
    refuse_after_scale_in(session, action)
    for stage in stages:
        if stage.on_training_thread:
            session.thread.run_parked(lambda s=stage: s.run(session, megatron, action), STAGE_TIMEOUT_S,
                                      park_wait=stop_timeout_s())
        else:
            stage.run(session, megatron, action)
    return 0


# The actions a rank acts on; the others (normal, pause, continue, prelock) the processor records itself.
ACTED_ON = ("stop", "clean", "rebuild_group", "repair", "rollback", "save_ckpt", "rename", "exit")


def recovery_actions(action: ControllerAction, rank: int) -> List[RecoveryAction]:
    """What the controller's action asks of this rank: one RecoveryAction, or for a REPAIR one per repair
    type this rank takes part in (none when the plan has no repair)."""
    common = dict(strategy=action.strategy, step=action.step if action.name not in ("stop", "clean", "exit") else -1)
    if action.name == "repair":
        return [RecoveryAction("repair", repair=own, error_ranks=own.dst, **common)
                for own in action.own_repairs(rank)]
    if action.name == "rebuild_group":
        return [RecoveryAction("rebuild_group", strategy=action.strategy, error_ranks=action.error_ranks,
                               absent_ranks=action.absent_ranks)]
    if action.name == "save_ckpt":
        return [RecoveryAction("save_ckpt", saves=action.saves, **common)]
    return [RecoveryAction(action.name, **common)]


def answer_actions(session, link, megatron=megatron_job) -> None:
    """Answer the controller's actions on this rank's link by running their flow's stages."""
    def answer(action: ControllerAction) -> Tuple[int, str]:
        if action.name not in ACTED_ON:
            return 0, ""
        try:
            for recovery_action in recovery_actions(action, link.rank):
                run_action(session, megatron, recovery_action)
        except LeavingTheJob as leaving:  # no failure: the controller retires this rank, which then exits
            session.leaving = str(leaving)
            session.thread.wake()  # the parked thread sees it now, not at the end of its wait
            return LEAVES_THE_JOB, f"rank {link.rank}: {leaving}"
        except Exception as exc:  # the reply names it; the controller's flow falls back
            logger.exception("rank %d action %s (step %d) failed", link.rank, action.name, action.step)
            return 1, f"rank {link.rank} action {action.name}: {type(exc).__name__}: {exc}"
        return 0, ""

    link.on_action(answer, answers=ACTED_ON)
