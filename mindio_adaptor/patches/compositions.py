"""The Megatron functions that several patches wrap, each with its wrappers in one visible order.

Read a row as a call: Megatron calls the first wrapper, which calls the next, down to Megatron's own
function. The registry applies the wrappers of a target in this order (the last one first, innermost)
whatever the order of PATCH_MODULES, and a unit test keeps this table equal to the patches' rows: a new
patch on a function some other patch wraps must take its place here.

Each wrapper is named `patch_module.function`.
"""
from typing import Dict, Tuple

COMPOSED: Dict[str, Tuple[str, ...]] = {
    "megatron.training.training.pretrain": (
        "job_end._pretrain_then_finish",  # tells the controller the training finished
        "warm_spare._record_dataset_provider",
    ),
    "megatron.training.initialize.initialize_megatron": (
        "controller_link._after_initialize",  # connects to the controller once Megatron is initialised
        "cpu_support._allow_no_cuda",
    ),
    "megatron.training.arguments.validate_args": (
        "fault_injection._read_plan",
        "arguments._validate",
    ),
    "megatron.training.training.train": (
        "job_end._train_then_final_part",
        "exception_loop._train_in_exception_loop",
        "sections._startup_ends",
    ),
    "megatron.training.training.train_step": (
        "exception_loop._train_step_in_exception_loop",  # a step computed again runs every wrapper below again
        "sections._forward_counted",
        "fault_injection._forward_with_faults",
        "loss_lines._recording_train_step",
        "training._after_train_step",
    ),
    "megatron.core.pipeline_parallel.schedules.backward_step": (
        "sections._backward_counted",
        "fault_injection._backward_with_faults",
    ),
    "megatron.training.training.training_log": (
        "train_reentry._log_as_uninterrupted",
        "uneven_batches._whole_batch_in_the_log",
        "loss_lines._training_log_once",
        "fault_injection._training_log_with_faults",
    ),
    "megatron.training.training.build_train_valid_test_data_iterators": (
        "warm_spare._rank_before_the_data",  # a warm spare takes its rank before the data is built
        "training._recording_the_test_iterator",
    ),
    "megatron.training.training.evaluate": (
        "interrupted_evaluation._evaluation_undone_when_interrupted",  # undoes an evaluation a fault interrupts
        "fault_injection._evaluate_with_faults",
    ),
    "megatron.training.training.save_checkpoint_and_time": (
        "saved_step_reports._report_saved_step",
        "job_end._final_save_with_fault_handling",
        "interrupted_save._note_save",  # notes a failed save before job_end decides on it
        "sections._timed_save",
    ),
}


def wrapper_name(wrapper) -> str:
    """`patch_module.function`, as COMPOSED names it."""
    return f"{wrapper.__module__.rsplit('.', 1)[-1]}.{wrapper.__name__}"


def innermost_first(target: str, wrapper) -> int:
    """The wrapper's place in applying `target`'s composition: 0 is applied first (innermost)."""
    order, name = COMPOSED[target], wrapper_name(wrapper)
    if name not in order:
        raise ValueError(f"{name} wraps {target}, whose composition in patches/compositions does not name it")
    return len(order) - 1 - order.index(name)
