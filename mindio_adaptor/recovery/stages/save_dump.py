"""SAVE_CKPT of the dying-gasp checkpoint, on the savers only (the controller picks one healthy holder
per optimizer shard).

The savers leave the broken communicators, meet in a process group of their own (recovery/comm_rebuild)
and re-initialise Megatron's parallel state on it as a job with ONE optimizer instance, each saver at
the data-parallel rank of its shard (core/layout/dump_world). Megatron's own save_checkpoint then writes a
checkpoint identical to what instance 0 of the full job writes (the same files, the same format: the
run's --ckpt-format, loadable with a stock --load) into a staging directory, which PUBLISH makes the
resume point (stages/publish_dump, core/checkpoint/dump_dir). Before saving, the data position, FLOP count and
RNG states are set back to those of the last completed step, the only step the controller dumps."""
import logging
import time
from typing import List

from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.core.layout.dump_world import DumpError, dump_world
from mindio_adaptor.recovery import resized_layout
from mindio_adaptor.recovery.staged_checkpoint import staging_prepared_by_one
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def save_dump(session, megatron, action) -> int:
    started, step, job, root = time.monotonic(), action.step, session.job, session.save_root
    snapshot = session.snapshot_of(step, "save")
    if not root:
        raise DumpError("the run has no --save directory: there is nowhere to write the dump")
    margs = megatron.args()
    savers = resized_layout.current_ranks(session, dense_savers(action.saves))  # named by their start's ranks
    members = dump_world(savers, margs, job.layout)
    try:
        session.communicators.rebuild_world(session, margs, members)
        megatron.reinitialize_parallel_state(megatron.single_instance_init_call(margs), replica_layout=False)
        megatron.point_optimizer_at_single_instance(job.optimizer, margs)
        staging = staging_prepared_by_one(root, step)
        megatron.set_data_position(snapshot)
        megatron.save_checkpoint_for_full_job(step, job.model, job.optimizer, job.scheduler,
                                              snapshot.floating_point_operations, str(staging), members,
                                              margs.world_size)
    except BaseException:
        dump_dir.discard(root, step)
        raise
    logger.info("dump of step %d: saved my part (savers %s as data-parallel ranks %s) in %.2f s", step,
                savers, list(members), time.monotonic() - started)
    session.timeline.mark("dump part saved", f"step {step} in {time.monotonic() - started:.2f} s")
    return 0


def dense_savers(saves) -> List[int]:
    """The savers of the dense optimizer's shards (optimizer type 0), from the action's assignments. An MoE
    job's expert shards are saved by the same ranks: the savers' world is laid out by the dense shards, and
    each saver holds the expert shard its place there takes (core/layout/dump_world checks it), so the expert
    savers the controller named are not needed."""
    dense = sorted({r for save in saves if save.optimizer_type == 0 for r in save.ranks})
    if not dense:
        raise DumpError(f"no saver of the dense optimizer's shards was named (savers by optimizer type: "
                        f"{[(save.optimizer_type, list(save.ranks)) for save in saves]})")
    return dense


SAVE_DUMP = Stage("save dump", save_dump)
