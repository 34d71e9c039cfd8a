"""The data position: the snapshot of a completed step (its samples, FLOPs and RNG), and the train and
validation data iterators started again at a sample."""
import logging
import sys
from typing import Any

from mindio_adaptor.core.steps.step_snapshot import StepSnapshot
from mindio_adaptor.megatron import uneven
from mindio_adaptor.megatron.args import args, rng_states

logger = logging.getLogger(__name__)


def _train_loop_flops(default: float) -> float:
    """The train loop keeps its FLOP count in a local (`num_floating_point_operations_so_far` of
    megatron.training.training.train); `args` only has the value the loop started with."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "train":
            names = frame.f_locals  # a copy of every local of train(), made at each read: read once
            if "num_floating_point_operations_so_far" in names:
                return names["num_floating_point_operations_so_far"]
        frame = frame.f_back
    return default


_STEP_FLOPS = {}  # (arguments, batch) -> Megatron's FLOPs of such a step


def _step_flops(margs, batch: int) -> float:
    """Megatron's closed-form count reads only the model's shape and the batch, which a job keeps: computed once per
    batch size (a ramp-up or a resize changes it) instead of at every step."""
    key = (id(margs), batch, id(uneven.active()))
    if key not in _STEP_FLOPS:
        from megatron.training.training import num_floating_point_operations

        _STEP_FLOPS.clear()
        _STEP_FLOPS[key] = num_floating_point_operations(margs, batch)
    return _STEP_FLOPS[key]


def snapshot_of_completed_step(step: int) -> StepSnapshot:
    """Called when step `step` is complete (its update and scheduler step done), before the train
    loop's bookkeeping, which is reproduced here: the samples of this step are added to the
    data position and its FLOPs (the closed-form count, exact for unpacked sequences) to the total."""
    from megatron.core import parallel_state as ps
    from megatron.core.num_microbatches_calculator import (get_current_global_batch_size,
                                                           get_current_running_global_batch_size, get_num_microbatches)

    margs = args()
    batch = (ps.get_data_parallel_world_size() * getattr(margs, "gtp_weight_remat_size", 1)
             * margs.micro_batch_size * get_num_microbatches())
    share = uneven.active()
    if share is not None:  # the loop's count is this rank's share; count_the_whole_batch makes it the step's
        batch = share.split.global_batch_size
    skipped = get_current_global_batch_size() - get_current_running_global_batch_size()
    flops = _train_loop_flops(margs.num_floating_point_operations_so_far)
    return StepSnapshot(step, margs.consumed_train_samples + batch, margs.skipped_train_samples + skipped,
                        flops + _step_flops(margs, batch), rng_states())


def build_datasets(provider) -> tuple:
    """Megatron's train, valid and test datasets from `provider` (build_train_valid_test_datasets, as patched)."""
    from megatron.training import training

    return training.build_train_valid_test_datasets(provider)


def iterator_at_sample(old, who: str):
    """A new iterator over `old`'s dataset from sample args.consumed_train_samples (Megatron's own
    sampler positions it, as a resume from a checkpoint does); `old`'s worker processes are shut down."""
    margs = args()
    return _iterator_from(old, margs.consumed_train_samples, margs.dataloader_type, "train", who,
                          uneven.active() is not None)


def _iterator_from(old, sample: int, dataloader_type: str, which: str, who: str, uneven_split: bool = False):
    # the loader builder as training binds it (from megatron.legacy.data in 0.12, megatron.training.datasets later)
    from megatron.training.training import build_pretraining_data_loader, cyclic_iter

    if dataloader_type not in ("single", "cyclic"):
        raise RuntimeError(f"{who}: cannot position a '{dataloader_type}' {which} data loader at sample {sample}")
    dataset = getattr(old, "_dataset", None)
    if dataset is None:
        raise RuntimeError(f"{who}: the {which} data iterator does not expose its dataset; cannot position it "
                           f"at sample {sample}")
    if uneven_split:
        loader = uneven.data_loader(args(), dataset, sample, who)
    else:
        loader = build_pretraining_data_loader(dataset, sample)
    if hasattr(old, "_shutdown_workers"):
        old._shutdown_workers()
    logger.info("%s: %s data iterator positioned at sample %d", who, which, sample)
    return iter(loader) if dataloader_type == "single" else iter(cyclic_iter(loader))


def position_train_iterators(holder, who: str, reposition=None, margs=None) -> None:
    """The train data iterator a process gave train() (Megatron's wrapper with its `iterable`; with a virtual
    pipeline, a list of them, one per model chunk; None where a stage reads no data), each started again at
    sample args.consumed_train_samples. A process that ran no train_step yet (no replay wrapper) needs this.
    `reposition(old, who)` and `margs`: iterator_at_sample and Megatron's unless given (a unit test's stand-ins)."""
    reposition = reposition or iterator_at_sample
    margs = margs if margs is not None else args()
    for one in _wrappers(holder, "train", margs.consumed_train_samples, who):
        one.iterable = reposition(one.iterable, who)


def position_valid_iterators(holder, who: str) -> None:
    """The validation data iterator(s) train() was given (Megatron's wrapper with its `iterable`; None without
    evaluation), each started again at sample args.consumed_valid_samples with the current data-parallel rank
    and size: a process that built its loader at sample 0 (a replacement), or every rank after a resize or a
    reload, evaluates the batches the uninterrupted run evaluates. With --full-validation Megatron starts each
    evaluation's loader from the beginning, so there is nothing to position."""
    _position_evaluation(holder, args().consumed_valid_samples, "validation", who)


def position_test_iterators(holders, who: str) -> None:
    """pretrain()'s test data iterators, read only after training, from their first sample: started again there
    with the current data-parallel rank and size (a resize changed them)."""
    for holder in holders:
        _position_evaluation(holder, 0, "test", who)


def _position_evaluation(holder, sample: int, which: str, who: str) -> None:
    margs = args()
    if getattr(margs, "full_validation", False):
        return
    for one in _wrappers(holder, which, sample, who):
        one.iterable = _iterator_from(one.iterable, sample, margs.dataloader_type, which, who)


def _wrappers(holder, which: str, sample: int, who: str) -> list:
    """Megatron's iterator wrappers in `holder` (one, or one per model chunk; None where there is none), each
    with the `iterable` a new position replaces."""
    wrappers = [one for one in (holder if isinstance(holder, (list, tuple)) else [holder]) if one is not None]
    for one in wrappers:
        if not hasattr(one, "iterable"):
            raise RuntimeError(f"{who}: cannot position its {which} data iterator ({type(one).__name__}) at "
                               f"sample {sample}")
    return wrappers
