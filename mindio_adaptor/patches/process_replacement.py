"""Process replacement (--enable-worker-reboot, the reference's ARF) on Megatron: the replacement's side.

A launcher that restarts only a dead worker (`mindio-adaptor launch`) starts it again with the same rank
and MINDIO_RESTARTED=1. The others are parked, stopped by the controller; they take part in no
collective until the communicators are rebuilt with the newcomer. So the replacement:
  1. initialises Megatron on torch's "fake" backend: every collective of Megatron's start-up (barriers,
     broadcasts, group creation) returns at once without peers, and the few results the adaptor needs
     from others (controller address, replica layout inputs, last communicator epoch) come from the
     job's store (core/job/job_store); no checkpoint is loaded;
  2. at the start of Megatron's train loop joins the job (recovery/replacement_join): reports
     ready ("ARF FINISH") and parks, like a rank after a fault; the controller then runs the "recover"
     flow (recovery/flows) on every rank: REBUILD_GROUP (real groups replace the fake ones, every
     reference re-pointed), REPAIR (its optimizer shard and the repair step's state: iteration, data
     position, FLOPs, scheduler, RNG, from a replica peer), ROLLBACK;
  3. on RETRY enters Megatron's train loop at the repair step (patches/train_reentry), while the others
     recompute the step they were interrupted in.

This module holds the start-up part (1); the session's `replacement` keeps the progress.
"""
import inspect
import logging
import os

from mindio_adaptor.core.job import hand_over, unreachable_job
from mindio_adaptor.core.layout import warm_assignment
from mindio_adaptor.patches import warm_rank
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)

ENV_RESTARTED = "MINDIO_RESTARTED"


def is_replacement() -> bool:
    """A process the launcher started again for a dead rank, with worker reboot on."""
    return os.environ.get(ENV_RESTARTED) == "1" and SESSION.config.enable_worker_reboot


def _init_on_the_fake_backend(wrapped, instance, args, kwargs):
    progress = SESSION.replacement
    if progress.joined or progress.fake_world or not is_replacement():
        return wrapped(*args, **kwargs)
    # torch's own fake process group (registered by importing this module): collectives are no-ops.
    from torch.testing._internal.distributed.fake_pg import FakeStore

    bound = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    rank = warm_rank.rank_before_the_world(bound["rank"])
    progress.active = progress.fake_world = True
    provisional = warm_assignment.provisional()
    who = f"warm spare (stand-in rank {rank})" if provisional else f"replacement process of rank {rank}"
    if not provisional and hand_over.reboot_type() == hand_over.HOT_SWITCH:
        who += " (hot switch)"
    if not provisional:  # a warm spare has no rank's addresses yet: checked when it takes one (patches/warm_spare)
        unreachable_job.exit_if_unreachable(who)
    logger.info("%s: Megatron starts on the fake backend; it joins the running job's communicators when the "
                "controller rebuilds them", who)
    return wrapped(backend="fake", store=FakeStore(), rank=rank, world_size=bound["world_size"],
                   timeout=bound.get("timeout"))


def _groups_of_the_fake_backend(wrapped, instance, args, kwargs):
    """Megatron asks for some groups on gloo explicitly; while the world is fake, every group is."""
    if not SESSION.replacement.fake_world:
        return wrapped(*args, **kwargs)
    bound = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    bound.pop("backend", None)
    bound.pop("pg_options", None)
    return wrapped(**bound)


def _no_checkpoint_for_a_replacement(wrapped, instance, args, kwargs):
    # Once its world is real (it joined), a load is a recovery's (a scale-out's REPAIR): it loads.
    if not is_replacement() or not SESSION.replacement.fake_world:
        return wrapped(*args, **kwargs)
    logger.info("replacement process: no checkpoint loaded; the state comes from a replica peer")
    return 0, 0


PATCHES = [
    Patch("torch.distributed", "init_process_group", _init_on_the_fake_backend),
    Patch("torch.distributed", "new_group", _groups_of_the_fake_backend),
    Patch("megatron.training.checkpointing", "load_checkpoint", _no_checkpoint_for_a_replacement),
]
