"""stages/injected_fault: a fault planned for the repair phase fires in CLEAN on its rank and step, once
per job; nothing fires elsewhere."""
import pytest

from recovery_fakes import FakeMegatron, action, session_at
from mindio_adaptor.core.detection.fault_inject import FaultPlan
from mindio_adaptor.recovery.stages.injected_fault import fire_repair_fault


def test_the_planned_repair_fault_fires_once_on_its_rank_and_step(tmp_path):
    session = session_at(3)
    session.job.fault_plan = FaultPlan.from_env(
        {"MINDIO_FAULT_INJECT": "raise:rank=1,step=4,phase=repair,msg=second fault in the repair"},
        state_dir=str(tmp_path))
    clean = action("clean", strategy="retry")
    assert fire_repair_fault(session, FakeMegatron(rank=0, curr_iteration=3), clean) == 0  # another rank
    assert fire_repair_fault(session, FakeMegatron(rank=1, curr_iteration=4), clean) == 0  # another step
    with pytest.raises(RuntimeError, match="second fault in the repair"):
        fire_repair_fault(session, FakeMegatron(rank=1, curr_iteration=3), clean)
    assert fire_repair_fault(session, FakeMegatron(rank=1, curr_iteration=3), clean) == 0  # once per job


def test_without_a_plan_nothing_fires():
    assert fire_repair_fault(session_at(3), FakeMegatron(rank=1, curr_iteration=3), action("clean")) == 0
