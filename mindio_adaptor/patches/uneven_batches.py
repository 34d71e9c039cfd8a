"""The uneven split of a step's global batch on Megatron (elastic training's scale-in to a data-parallel size
that does not divide the step's micro-batches, e.g. dp3 for 16: 6, 5, 5; core/layout/uneven_split, docs/elastic.md).

Megatron assumes every data-parallel rank runs the same number of micro-batches. Where they differ:
- the count: Megatron's global micro-batch calculator is replaced by one that gives this rank's own count,
  which its schedule runs; a reconfiguration (the scale-out) puts Megatron's own calculator back
  (megatron/uneven);
- the samples: the rank's data loader takes its micro-batches of each step from `UnevenSplit.batches`
  instead of Megatron's sampler (megatron/uneven.data_loader, from megatron_job.iterator_at_sample);
- the loss (megatron/uneven.weigh_loss, at the scale-in's REPAIR): the optimizer's `scale_loss`, which Megatron's schedule applies to each micro-batch's loss before
  its backward, weighs it by the rank's share (n_r x dp / N), so DDP's average is the mean over the step;
  the loss Megatron logs needs nothing: it sums losses and token counts over every rank before dividing;
- the accounting: Megatron counts a step's samples on every rank as dp x mbs x its micro-batch count (the
  consumed samples, the scheduler's increment, the FLOPs, the logged batch size): what is missing from this
  rank's count is added, so every rank counts the global batch, as at any even size.
"""
from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.patches.patch import Patch


def count_the_whole_batch(margs, train_step_result, scheduler) -> None:
    """After a train_step at an uneven size, before Megatron's loop adds its per-rank count to the consumed
    samples: what that count lacks of the global batch, in the consumed samples and in the scheduler (which
    train_step stepped by the same per-rank count where the update was made)."""
    share = megatron_job.uneven_share()
    if share is None or not share.missing_samples():
        return
    missing = share.missing_samples()
    megatron_job.count_samples(margs, missing)
    skipped_iter = train_step_result[1]
    if not skipped_iter and scheduler is not None:
        scheduler.step(increment=missing)


def _whole_batch_flops(wrapped, instance, args, kwargs):
    """Megatron's FLOPs of a step, counted for the global batch (its caller passes this rank's count)."""
    share = megatron_job.uneven_share()
    if share is None:
        return wrapped(*args, **kwargs)
    margs = args[0] if args else kwargs["args"]
    return wrapped(margs, share.split.global_batch_size)


def _whole_batch_in_the_log(wrapped, instance, args, kwargs):
    """Megatron's log line and writers show a step's batch as mbs x dp x the micro-batch count: for the log,
    the whole step's micro-batches on one data-parallel rank, which is the global batch (the count is read
    nowhere else in the log but for MoE, MTP and indexer auxiliary losses, which a scale-in refuses)."""
    share = megatron_job.uneven_share()
    if share is None:
        return wrapped(*args, **kwargs)
    with megatron_job.whole_batch_as_one_rank(megatron_job.args(), share):
        return wrapped(*args, **kwargs)


PATCHES = [
    Patch("megatron.training.training", "num_floating_point_operations", _whole_batch_flops),
    Patch("megatron.training.training", "training_log", _whole_batch_in_the_log),
]
