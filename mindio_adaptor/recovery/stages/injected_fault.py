"""The fault-injection point of a repair (MINDIO_FAULT_INJECT phase "repair", core/detection/fault_inject): first
in CLEAN, where a real fault during a repair would surface, before any state is changed."""
from mindio_adaptor.recovery.stages.stage import Stage


def fire_repair_fault(session, megatron, action) -> int:
    plan = session.job.fault_plan
    if plan:
        plan.maybe_fire(megatron.args().rank, megatron.current_iteration(), "repair")
    return 0


REPAIR_FAULT_POINT = Stage("repair fault point", fire_repair_fault)
