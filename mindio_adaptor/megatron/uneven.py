"""Megatron's side of the uneven split of a step's global batch (patches/uneven_batches has the rest): the
rank's share in place of Megatron's global micro-batch calculator, its data loader over the split's
micro-batches, and Megatron's arguments as its log counts a step's batch."""
import contextlib
import logging
import sys
from typing import Optional

from mindio_adaptor.core.layout.uneven_split import UnevenSplit

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
    """A reconfiguration of Megatron's calculator (the scale-out) puts its own back."""
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


def count_samples(margs, missing: int) -> None:
    """Megatron's consumed samples, with what its per-rank count of a step lacked of the global batch."""
    margs.consumed_train_samples += missing


@contextlib.contextmanager
def whole_batch_as_one_rank(margs, share: RankShareCalculator):
    """Megatron's arguments and calculator as if one data-parallel rank ran the whole step's micro-batches,
    which Megatron's log counts as mbs x dp x the micro-batch count: the global batch."""
    kept = margs.data_parallel_size, share.num_micro_batches
    margs.data_parallel_size, share.num_micro_batches = 1, share.split.total_microbatches
    try:
        yield
    finally:
        margs.data_parallel_size, share.num_micro_batches = kept
