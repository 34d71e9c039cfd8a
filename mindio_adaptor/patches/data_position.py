"""A training data iterator started again at a given sample: a replacement process built its loader
at sample 0, and an online reload of a checkpoint goes back to the checkpoint's sample. Megatron's
own sampler does the positioning (build_pretraining_data_loader with consumed samples), as a resume
from a checkpoint does."""
import logging

logger = logging.getLogger(__name__)


def iterator_at_sample(old, margs, who: str):
    """A new iterator over `old`'s dataset from sample margs.consumed_train_samples; `old`'s worker
    processes are shut down."""
    from megatron.training.datasets.data_samplers import build_pretraining_data_loader
    from megatron.training.training import cyclic_iter

    if margs.dataloader_type not in ("single", "cyclic"):
        raise RuntimeError(f"{who}: cannot position a '{margs.dataloader_type}' data loader at sample "
                           f"{margs.consumed_train_samples}")
    dataset = getattr(old, "_dataset", None)
    if dataset is None:
        raise RuntimeError(f"{who}: the train data iterator does not expose its dataset; cannot position it "
                           f"at sample {margs.consumed_train_samples}")
    loader = build_pretraining_data_loader(dataset, margs.consumed_train_samples)
    if hasattr(old, "_shutdown_workers"):
        old._shutdown_workers()
    logger.info("%s: data iterator positioned at sample %d", who, margs.consumed_train_samples)
    return iter(loader) if margs.dataloader_type == "single" else iter(cyclic_iter(loader))
