"""A checkpoint that the ranks of a recovery write so that no crash can spoil the resume point: every rank saves
into a staging directory (one of them empties it first), and rank 0 publishes it once every rank is done
(core/checkpoint/dump_dir: the iteration directory is at every moment absent or complete, the tracker moves last). A failure
on the way discards the staging directory: the previous resume point stays."""
import torch.distributed as dist

from mindio_adaptor.core.checkpoint import dump_dir


def staging_prepared_by_one(root: str, step: int):
    """One rank empties the staging directory; the others wait for it (they may share the file system), so no
    rank ever deletes another's files."""
    if dist.get_rank() == 0:
        dump_dir.prepare_staging(root, step)
    dist.barrier()
    return dump_dir.staging_root(root, step)


def save_and_publish(megatron, job, root: str, snapshot, members, world_size: int) -> None:
    """Megatron's save of `snapshot`'s step by every rank of the current world, published by rank 0; in place
    before any rank returns. `members`, `world_size`: the job whose rerun state the checkpoint carries."""
    step = snapshot.iteration
    try:
        staging = str(staging_prepared_by_one(root, step))
        megatron.set_data_position(snapshot)
        megatron.save_checkpoint_for_full_job(step, job.model, job.optimizer, job.scheduler,
                                              snapshot.floating_point_operations, staging, list(members), world_size)
        dist.barrier()
        if dist.get_rank() == 0:
            dump_dir.publish(root, step)
        dist.barrier()
    except BaseException:
        dump_dir.discard(root, step)
        raise
