"""The uneven split of a step's global batch on Megatron (elastic training's scale-in to a data-parallel size
that does not divide the step's micro-batches, e.g. dp3 for 16: 6, 5, 5; core/uneven_split, docs/elastic.md).

Megatron assumes every data-parallel rank runs the same number of micro-batches. Where they differ:
- the count: Megatron's global micro-batch calculator is replaced by one that gives this rank's own count,
  which its schedule runs; a reconfiguration (the scale-out) puts Megatron's own calculator back;
- the samples: the rank's data loader takes its micro-batches of each step from `UnevenSplit.batches`
  instead of Megatron's sampler (patches/megatron_job.iterator_at_sample);
- the loss: the optimizer's `scale_loss`, which Megatron's schedule applies to each micro-batch's loss before
  its backward, weighs it by the rank's share (n_r x dp / N), so DDP's average is the mean over the step;
  the loss Megatron logs needs nothing: it sums losses and token counts over every rank before dividing;
- the accounting: Megatron counts a step's samples on every rank as dp x mbs x its micro-batch count (the
  consumed samples, the scheduler's increment, the FLOPs, the logged batch size): what is missing from this
  rank's count is added, so every rank counts the global batch, as at any even size.
"""
import logging
import sys
from typing import Optional

from mindio_adaptor.core.uneven_split import UnevenSplit
from mindio_adaptor.patches.patch import Patch

logger = logging.getLogger(__name__)


class RankShareCalculator:
    """Megatron's micro-batch calculator interface, answering with this rank's share of the step."""

    def __init__(self, split: UnevenSplit, dp_rank: int):
        self.split, self.dp_rank = split, dp_rank
        self.num_micro_batches = split.microbatches(dp_rank)

    def get(self) -> int:
        return self.num_micro_batches

    def get_current_global_batch_size(self) -> int:
        return self.split.global_batch_size

    def get_current_running_global_batch_size(self) -> int:
        return self.split.global_batch_size

    def get_micro_batch_size(self) -> int:
        return self.split.micro_batch_size

    def update(self, consumed_samples, consistency_check, verbose=False) -> None:
        """A constant batch size: nothing changes with the samples consumed."""

    def missing_samples(self) -> int:
        """What Megatron's per-rank count of a step (dp x mbs x this rank's micro-batches) lacks of the
        global batch (negative where this rank takes more than the average)."""
        counted = self.split.data_parallel_size * self.split.micro_batch_size * self.num_micro_batches
        return self.split.global_batch_size - counted


def install(split: UnevenSplit, dp_rank: int) -> None:
    from megatron.core import num_microbatches_calculator

    num_microbatches_calculator._GLOBAL_NUM_MICROBATCHES_CALCULATOR = RankShareCalculator(split, dp_rank)


def active() -> Optional[RankShareCalculator]:
    """The rank's share while the job runs at an uneven size; None otherwise (also before Megatron's
    calculator module was imported: nothing was installed then)."""
    calculators = sys.modules.get("megatron.core.num_microbatches_calculator")
    calculator = getattr(calculators, "_GLOBAL_NUM_MICROBATCHES_CALCULATOR", None)
    return calculator if isinstance(calculator, RankShareCalculator) else None


class RankShareSampler:
    """A batch sampler of this rank's micro-batches, step after step, from `consumed_samples`."""

    def __init__(self, share: RankShareCalculator, consumed_samples: int, total_samples: int):
        self.share, self.consumed_samples, self.total_samples = share, consumed_samples, total_samples

    def __iter__(self):
        return self.share.split.batches(self.share.dp_rank, self.consumed_samples, self.total_samples)

    def __len__(self) -> int:
        steps = (self.total_samples - self.consumed_samples) // self.share.split.global_batch_size
        return steps * self.share.num_micro_batches


def data_loader(margs, dataset, consumed_samples: int, who: str):
    """This rank's data loader at an uneven size, as Megatron's single-pass loader with our batch sampler."""
    import torch

    share = active()
    if margs.dataloader_type != "single":
        raise RuntimeError(f"{who}: the uneven split takes its samples in Megatron's single-pass order; "
                           f"'{margs.dataloader_type}' data loaders are not supported at dp{margs.data_parallel_size}")
    sampler = RankShareSampler(share, consumed_samples, len(dataset))
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=margs.num_workers,
                                       pin_memory=True, persistent_workers=margs.num_workers > 0)


def weigh_loss(margs, optimizer) -> None:
    """Each micro-batch's loss weighed by this rank's share: the optimizer's own scale_loss (Megatron's
    schedule calls it through config.grad_scale_func, which train() takes from the optimizer) times the
    weight. A rebuilt optimizer (the scale-out's) takes the place of this one and drops the weight. With
    --calculate-per-token-loss Megatron divides the summed gradients by the tokens of every rank, which is
    exact however the micro-batches are shared: no weight."""
    share = active()
    if share is None or margs.calculate_per_token_loss:
        return
    weight = share.split.loss_scale(share.dp_rank)
    unweighted = optimizer.scale_loss

    def weighted_scale_loss(loss):
        return unweighted(loss) * weight

    optimizer.scale_loss = weighted_scale_loss
    logger.info("uneven split: data-parallel rank %d takes %d of %d micro-batches, its loss weighted by %.6g",
                share.dp_rank, share.num_micro_batches, share.split.total_microbatches, weight)


def count_the_whole_batch(margs, train_step_result, scheduler) -> None:
    """After a train_step at an uneven size, before Megatron's loop adds its per-rank count to the consumed
    samples: what that count lacks of the global batch, in the consumed samples and in the scheduler (which
    train_step stepped by the same per-rank count where the update was made)."""
    share = active()
    if share is None or not share.missing_samples():
        return
    missing = share.missing_samples()
    margs.consumed_train_samples += missing
    skipped_iter = train_step_result[1]
    if not skipped_iter and scheduler is not None:
        scheduler.step(increment=missing)


def _whole_batch_flops(wrapped, instance, args, kwargs):
    """Megatron's FLOPs of a step, counted for the global batch (its caller passes this rank's count)."""
    share = active()
    if share is None:
        return wrapped(*args, **kwargs)
    margs = args[0] if args else kwargs["args"]
    return wrapped(margs, share.split.global_batch_size)


def _whole_batch_in_the_log(wrapped, instance, args, kwargs):
    """Megatron's log line and writers show a step's batch as mbs x dp x the micro-batch count: for the log,
    the whole step's micro-batches on one data-parallel rank, which is the global batch (the count is read
    nowhere else in the log but for MoE, MTP and indexer auxiliary losses, which a scale-in refuses)."""
    share = active()
    if share is None:
        return wrapped(*args, **kwargs)
    from megatron.training.global_vars import get_args

    margs = get_args()
    kept = margs.data_parallel_size, share.num_micro_batches
    margs.data_parallel_size, share.num_micro_batches = 1, share.split.total_microbatches
    try:
        return wrapped(*args, **kwargs)
    finally:
        margs.data_parallel_size, share.num_micro_batches = kept


PATCHES = [
    Patch("megatron.training.training", "num_floating_point_operations", _whole_batch_flops),
    Patch("megatron.training.training", "training_log", _whole_batch_in_the_log),
]
