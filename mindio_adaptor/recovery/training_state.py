"""What the adaptor keeps of the running Megatron job: model, optimizer, scheduler, replica layout, and the
hooks other patches attach to its steps (held by the recovery session as `SESSION.job`). How an optimizer's
shard is walked is the Megatron door's (mindio_adaptor/megatron/optimizer)."""
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional


@dataclass
class TrainingState:
    model: Optional[List[Any]] = None
    optimizer: Any = None
    scheduler: Any = None
    layout: Any = None  # core.layout.replica_layout.ReplicaLayout, when high availability is on
    model_parallel_init: Any = None  # (args, kwargs) of Megatron's initialize_model_parallel call
    setup_call: Any = None  # (args, kwargs) of Megatron's setup_model_and_optimizer call (a scale-in repeats it)
    # The validation data iterator train() was given: a replacement, a resize or a reload positions it again.
    valid_data_iterator: Any = None
    test_data_iterators: List[Any] = field(default_factory=list)  # pretrain()'s; a resize starts them again
    completed_steps: List[int] = field(default_factory=list)
    fault_plan: Any = None  # core.detection.fault_inject.FaultPlan
    # Called as hook(step) before every optimizer update, and once per iteration when its state is
    # final: after the scheduler's step, or when train_step returns from a skipped update
    # (step = the iteration being computed, as Megatron's log numbers it).
    before_optimizer_step: List[Callable[[int], None]] = field(default_factory=list)
    step_completed: List[Callable[[int], None]] = field(default_factory=list)
    # Called once per iteration right before the optimizer changes its state in place.
    before_update: List[Callable[[int], None]] = field(default_factory=list)
    training_finished: bool = False  # pretrain returned: last step, final save and evaluation done
    # Called as hook(training_goes_on) on a rank that waited for the controller's decision, once it
    # came: True after an online repair, False when the job ends.
    decided: List[Callable[[bool], None]] = field(default_factory=list)
    # Called when the process exits, before the rank leaves the controller.
    before_leaving: List[Callable[[], None]] = field(default_factory=list)
    updating_iteration: int = -1
    scheduler_step_ends: int = -1  # the iteration whose optimizer step returned, until its scheduler step
