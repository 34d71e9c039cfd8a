"""The one place a recovery rebuilds this process's communicators (stages rebuild_groups and save_dump):
a new default group among `members` on the job's store, under an epoch no earlier rebuild of the job
used, so stale keys of a previous membership can never be read. Every member counts the rebuilds it
took part in (session.next_comm_epoch); a replacement process, which took part in none, starts from
the last epoch the job published in its store (no rebuild runs while it starts: the others are parked
waiting for it)."""
from datetime import timedelta
from typing import Sequence

import torch.distributed as dist

from mindio_adaptor.core import job_store
from mindio_adaptor.core.comm import CommEpochs
from mindio_adaptor.core.recovery_limits import rebuild_timeout_s

LAST_EPOCH = "comm/last_epoch"


def continue_epochs_of_the_job(session) -> int:
    """In a replacement process, before its first rebuild: number epochs after the job's last one."""
    session.next_comm_epoch = job_store.read_or(LAST_EPOCH, 0) + 1
    return session.next_comm_epoch


def rebuild_world(session, margs, members: Sequence[int]) -> int:
    """Tear down every group and join a new default group among `members` (global ranks; the new
    rank of each is its index). Returns the epoch used."""
    epoch = session.next_comm_epoch
    session.next_comm_epoch += 1
    # margs.rank, not dist.get_rank(): a rebuild that failed earlier (a member never arrived) leaves
    # no default group, and the dump that follows rebuilds again.
    epochs = CommEpochs(margs.rank, margs.world_size, backend=session.thread.backend,
                        timeout=timedelta(minutes=margs.distributed_timeout_minutes),
                        join_timeout=timedelta(seconds=rebuild_timeout_s()))
    epochs.rebuild(epoch, list(members))
    if dist.get_rank() == 0:  # the first member, in the new numbering
        job_store.publish(LAST_EPOCH, epoch)
    return epoch
