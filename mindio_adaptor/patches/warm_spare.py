"""A warm spare that runs the training script before it has a rank (launch/warm_worker.py --ahead,
core/layout/warm_assignment), on Megatron: how far it goes as a stand-in rank, and how it takes its real rank.

It starts as a replacement process does (patches/process_replacement): Megatron parses its arguments and
initialises on torch's "fake" backend. Then:
- with data parallelism alone (tensor, pipeline, context and expert parallel sizes 1), on a host without an
  accelerator (patches/warm_rank.runs_ahead: the device is the local rank's), every rank builds the same model, so the spare goes on as the stand-in rank through the model's build (and its DDP wrapper) and
  waits right before the distributed optimizer is built: that one depends on the rank's place in its
  optimizer instance (which shard it owns). Given its rank, it starts the fake world again at that rank,
  initialises Megatron's parallel state again (the replica layout read from the job's store: the stand-in
  never touches a store, so that a standby's spares need none) and re-points every reference to the
  stand-in's groups (core/communication/group_repoint, as at REBUILD_GROUP); DDP's bucket groups keep their rank in the
  optimizer instance as a number, set again. Before it waits it also builds the datasets (their indices are
  the same on every rank; the loaders, whose samplers read the data-parallel rank, are built after). It then
  connects to the recovery controller (deferred by patches/controller_link), builds the optimizer and its data
  loaders, and joins as any replacement;
- otherwise (a model partition or a device that depends on the rank) it waits before Megatron creates its
  world: the arguments are parsed, the rest is done at the real rank.
The seeds need no fix-up: with data parallelism alone Megatron seeds every rank alike (worker reboot refuses
--data-parallel-random-init), and the repair installs the replica peer's RNG states anyway.
"""
import inspect
import logging
import time

import torch.distributed as dist

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.communication.group_repoint import repoint
from mindio_adaptor.core.job import hand_over, unreachable_job
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.patches import warm_rank
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)

def take_the_assigned_rank(model) -> None:
    """The wait before the optimizer's build, then the stand-in's world and groups become the rank's."""
    from mindio_adaptor.patches import controller_link

    stand_in = dist.get_rank()
    rank = warm_rank.adopt(f"Megatron initialised and the model built as stand-in rank {stand_in}")
    unreachable_job.exit_if_unreachable(f"warm spare taking rank {rank}")
    started = time.monotonic()
    # Also when the rank is the stand-in's: the stand-in read no replica layout, so its optimizer instances are
    # Megatron's own cut, not yet the layout's.
    _fake_world_at(rank)
    refresh_bucket_group_ranks(model)
    controller_link.connect_after_initialize()
    why = " for a hot switch" if hand_over.reboot_type() == hand_over.HOT_SWITCH else ""
    logger.info("warm spare: took rank %d%s (built as stand-in rank %d); world, groups and controller link "
                "set up in %.2f s", rank, why, stand_in, time.monotonic() - started)


def _fake_world_at(rank: int) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from mindio_adaptor.recovery.stages.rebuild_groups import RebuildError, old_to_new

    old, old_world, world = megatron_job.process_groups(), dist.group.WORLD, dist.get_world_size()
    dist.destroy_process_group()
    dist.init_process_group(backend="fake", store=FakeStore(), rank=rank, world_size=world)
    megatron_job.reinitialize_parallel_state(SESSION.job.model_parallel_init, replica_layout=True)
    mapping = old_to_new(old, megatron_job.process_groups())
    mapping.setdefault(old_world, dist.group.WORLD)
    del old, old_world
    report = repoint(mapping, owner_modules=("megatron",))
    if report.immutable:
        raise RebuildError(f"the stand-in rank's process groups are still held in {sorted(set(report.immutable))}")


def refresh_bucket_group_ranks(model) -> None:
    """DDP's bucket groups keep this rank's place in its optimizer instance as a number (which shard of each
    bucket it reduces into); read it again from the re-pointed group."""
    for chunk in model:
        for group in [*getattr(chunk, "bucket_groups", []), *getattr(chunk, "expert_parallel_bucket_groups", [])]:
            if hasattr(group, "intra_distributed_optimizer_instance_rank"):
                group.intra_distributed_optimizer_instance_rank = group.intra_distributed_optimizer_instance_group.rank()


def _rank_before_the_optimizer(wrapped, instance, args, kwargs):
    if warm_assignment.provisional():
        model = inspect.signature(wrapped).bind(*args, **kwargs).arguments["model_chunks"]
        _build_datasets_ahead()
        take_the_assigned_rank(model)
    return wrapped(*args, **kwargs)


# The datasets (not their loaders: a sampler reads the data-parallel rank) are the same on every rank with data
# parallelism alone, and building their indices is most of a data start-up: a spare builds them while it waits.
_datasets = {"provider": None, "built": None}


def _record_dataset_provider(wrapped, instance, args, kwargs):
    if warm_assignment.provisional():
        _datasets["provider"] = inspect.signature(wrapped).bind(*args, **kwargs).arguments.get(
            "train_valid_test_dataset_provider")
    return wrapped(*args, **kwargs)


def _build_datasets_ahead() -> None:
    provider = _datasets["provider"]
    if provider is None:
        return
    started = time.monotonic()
    _datasets["built"] = (provider, megatron_job.build_datasets(provider))
    logger.info("warm spare: datasets built ahead in %.2f s", time.monotonic() - started)


def _datasets_built_ahead(wrapped, instance, args, kwargs):
    built, _datasets["built"] = _datasets["built"], None
    bound = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    if built is not None and built[0] is bound["build_train_valid_test_datasets_provider"] \
            and bound.get("train_valid_test_num_samples") is None:
        return built[1]
    return wrapped(*args, **kwargs)


def _rank_before_the_data(wrapped, instance, args, kwargs):
    """A job without an optimizer (nothing to train) never reaches the wait above: its rank, before the data
    iterators (built from the data-parallel rank)."""
    if warm_assignment.provisional():
        take_the_assigned_rank(SESSION.job.model or [])
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch("megatron.training.training", "pretrain", _record_dataset_provider),
    Patch("megatron.training.training", "build_train_valid_test_datasets", _datasets_built_ahead),
    Patch("megatron.core.optimizer", "get_megatron_optimizer", _rank_before_the_optimizer),
    Patch("megatron.training.training", "build_train_valid_test_data_iterators", _rank_before_the_data),
]
