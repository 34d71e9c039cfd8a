"""The snapshot of a completed step: what a checkpoint of it needs beyond model and optimizer. Plain data,
taken by the Megatron door after each step and kept by the recovery session."""
from dataclasses import dataclass


@dataclass
class StepSnapshot:
    """What a checkpoint of the last completed step needs beyond model and optimizer."""
    iteration: int  # the last completed step, numbered as Megatron's log prints it
    consumed_train_samples: int
    skipped_train_samples: int
    floating_point_operations: float
    rng: dict
