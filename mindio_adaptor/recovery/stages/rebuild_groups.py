"""Rebuild the communicators (online repair at CLEAN; process replacement at REBUILD_GROUP, once the
replacement process is there to join them): the world group under a new epoch (recovery/comm_rebuild),
Megatron's parallel state initialised again with the call it was first initialised with, and every
reference to an old group (DDP buffers and bucket groups, the optimizer, configs) re-pointed to its
new counterpart (core/communication/group_repoint), matched through parallel_state's globals. In a replacement
process the old groups are those of the fake backend."""
import logging
import time

import torch.distributed as dist

from mindio_adaptor.core.communication.group_repoint import repoint
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


class RebuildError(RuntimeError):
    pass


def old_to_new(old: dict, new: dict) -> dict:
    """Each old group -> the group of the same parallel_state name (and index) after the rebuild."""
    mapping = {}
    for name, value in old.items():
        if name not in new:
            raise RebuildError(f"parallel_state.{name} existed before the rebuild and not after it")
        befores = value if isinstance(value, list) else [value]
        afters = new[name] if isinstance(value, list) else [new[name]]
        for i, before in enumerate(befores):
            mapping.setdefault(before, afters[i])
    return mapping


# The flows of an online repair: the same processes, every one alive, before and after; and a
# scale-out's CLEAN, among the survivors of the scale-in (the returned processes join at REBUILD_GROUP).
SAME_PROCESSES = ("retry", "reload", "scale_out")


def rebuild_groups(session, megatron, action) -> int:
    started = time.monotonic()
    if session.flow in SAME_PROCESSES and not session.replacement.fake_world:
        epoch = session.communicators.reinitialize_world_in_place(session, megatron.args())
        if epoch is not None:
            # The group objects Megatron holds are the same: nothing to initialise again or re-point.
            megatron.drop_gradients(session.job.model)
            logger.info("communicators rebuilt in place (epoch %d): a fresh backend under each process group, "
                        "in %.2f s", epoch, time.monotonic() - started)
            session.timeline.mark("groups rebuilt", f"epoch {epoch} in place")  # no ", ": it separates marks
            return 0
    old = megatron.process_groups()
    old_world = dist.group.WORLD
    epoch = session.communicators.rebuild_world(session, megatron.args(), range(dist.get_world_size()))
    session.replacement.fake_world = False  # from here on, collectives of a replacement are real
    megatron.reinitialize_parallel_state(session.job.model_parallel_init, replica_layout=True)
    mapping = old_to_new(old, megatron.process_groups())
    mapping.setdefault(old_world, dist.group.WORLD)
    del old, old_world  # only the mapping may still hold the old groups
    report = repoint(mapping, owner_modules=("megatron",))
    if report.in_frames:
        logger.info("%d old group reference(s) remain in function locals (the interrupted step's "
                    "frames, never resumed): %s", len(report.in_frames), sorted(set(report.in_frames)))
    if report.immutable:
        raise RebuildError(f"old process groups are still held in {sorted(set(report.immutable))}; "
                           f"training on them would fail")
    megatron.drop_gradients(session.job.model)
    logger.info("communicators rebuilt (epoch %d, store %s), %d group references re-pointed in %.2f s", epoch,
                session.comm_store, report.replaced, time.monotonic() - started)
    session.timeline.mark("groups rebuilt", f"epoch {epoch}")
    return 0


REBUILD_GROUPS = Stage("rebuild groups", rebuild_groups)
