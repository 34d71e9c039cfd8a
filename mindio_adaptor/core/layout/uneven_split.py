"""A step's global batch shared by data-parallel ranks whose number does not divide it (elastic training's
scale-in to a size such as dp3 for a global batch of 16 micro-batches, docs/elastic.md), as plain data.

The step's micro-batches keep the order Megatron's pretraining sampler gives them: micro-batch j of a step
holds samples `step start + j * micro batch size + 0..mbs-1`, and it goes to rank `j % dp`, as Megatron's
sampler hands micro step i's slice r to data-parallel rank r (j = i * dp + r). Where dp divides the step's
micro-batches this is exactly Megatron's order; where it does not, the first ranks take one micro-batch more
(dp3 for 16: 6, 5, 5). Every sample of the step is taken exactly once, so a step sees the same samples as at
any other size.

The loss: Megatron divides each rank's loss by its own micro-batch count and DDP averages the gradients over
the data-parallel ranks, which weighs every rank alike. A rank with n of the step's N micro-batches must
weigh n * dp / N for the averaged gradient to be the mean over all N micro-batches (1 where it divides).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Tuple


@dataclass(frozen=True)
class UnevenSplit:
    global_batch_size: int
    micro_batch_size: int
    data_parallel_size: int

    def __post_init__(self):
        if min(self.global_batch_size, self.micro_batch_size, self.data_parallel_size) < 1:
            raise ValueError(f"sizes must be >= 1: global batch {self.global_batch_size}, micro batch "
                             f"{self.micro_batch_size}, dp{self.data_parallel_size}")
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"the global batch size {self.global_batch_size} is not a multiple of the micro-batch "
                             f"size {self.micro_batch_size}")
        if self.total_microbatches < self.data_parallel_size:
            raise ValueError(f"{self.total_microbatches} micro-batches per step leave some of dp"
                             f"{self.data_parallel_size} without any")

    @property
    def total_microbatches(self) -> int:
        return self.global_batch_size // self.micro_batch_size

    @property
    def even(self) -> bool:
        return self.total_microbatches % self.data_parallel_size == 0

    def microbatches(self, dp_rank: int) -> int:
        """How many of the step's micro-batches `dp_rank` takes."""
        self.check_rank(dp_rank)
        whole, extra = divmod(self.total_microbatches, self.data_parallel_size)
        return whole + (1 if dp_rank < extra else 0)

    def counts(self) -> Tuple[int, ...]:
        return tuple(self.microbatches(r) for r in range(self.data_parallel_size))

    def loss_scale(self, dp_rank: int) -> float:
        """The factor on `dp_rank`'s loss that makes the data-parallel average of the gradients the mean over
        all the step's micro-batches."""
        return self.microbatches(dp_rank) * self.data_parallel_size / self.total_microbatches

    def samples(self, dp_rank: int, step_start: int) -> List[List[int]]:
        """The sample ids of `dp_rank`'s micro-batches, in order, for the step whose first sample is
        `step_start` (the consumed samples before it)."""
        self.check_rank(dp_rank)
        mbs, dp = self.micro_batch_size, self.data_parallel_size
        return [list(range(step_start + j * mbs, step_start + (j + 1) * mbs))
                for j in range(dp_rank, self.total_microbatches, dp)]

    def batches(self, dp_rank: int, consumed_samples: int, total_samples: int) -> Iterator[List[int]]:
        """`dp_rank`'s micro-batches step after step from `consumed_samples` (a step boundary) while a whole
        step fits in `total_samples`: a batch sampler, as Megatron's data loader takes one."""
        if consumed_samples % self.global_batch_size:
            raise ValueError(f"consumed samples {consumed_samples} are not at a step boundary (global batch "
                             f"{self.global_batch_size})")
        start = consumed_samples
        while start + self.global_batch_size <= total_samples:
            yield from self.samples(dp_rank, start)
            start += self.global_batch_size

    def describe(self) -> str:
        if self.even:
            return f"{self.counts()[0]} micro-batches each"
        counts = ", ".join(str(n) for n in self.counts())
        return f"{counts} micro-batches (uneven: each rank's loss weighted by its share)"

    def check_rank(self, dp_rank: int) -> None:
        if not 0 <= dp_rank < self.data_parallel_size:
            raise ValueError(f"data-parallel rank {dp_rank} is not in dp{self.data_parallel_size}")
