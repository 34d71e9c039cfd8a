"""The one place a recovery rebuilds this process's communicators (patches/dump, patches/online_repair,
patches/process_replacement): a new default group among `members` on the job's store, under an epoch no
earlier rebuild of the job used, so stale keys of a previous membership can never be read. Every member
counts the rebuilds it took part in; a replacement process, which took part in none, starts from the
last epoch the job published in its store (no rebuild runs while it starts: the others are parked
waiting for it)."""
from datetime import timedelta
from typing import Sequence

import torch.distributed as dist

from mindio_adaptor.core import job_store
from mindio_adaptor.core.comm import CommEpochs
from mindio_adaptor.core.env_values import seconds_from_env
from mindio_adaptor.patches.exception_loop import TRAINING

LAST_EPOCH = "comm/last_epoch"
REBUILD_TIMEOUT_ENV = "MINDIO_REBUILD_TIMEOUT_S"
_next_epoch = 1


def rebuild_timeout_s() -> float:
    """How long a member waits for the others to arrive at a rebuild. Every member is known alive
    when the controller asks for it (a replacement has registered), so a missing one died since: a
    second fault, which should fall back to the dump without waiting long."""
    return seconds_from_env(REBUILD_TIMEOUT_ENV, 60.0, 1, 3600)


def continue_epochs_of_the_job() -> int:
    """In a replacement process, before its first rebuild: number epochs after the job's last one."""
    global _next_epoch
    _next_epoch = job_store.read_or(LAST_EPOCH, 0) + 1
    return _next_epoch


def rebuild_world(members: Sequence[int]) -> int:
    """Tear down every group and join a new default group among `members` (global ranks; the new
    rank of each is its index). Returns the epoch used."""
    global _next_epoch
    from megatron.training.global_vars import get_args

    margs = get_args()
    epoch, _next_epoch = _next_epoch, _next_epoch + 1
    # margs.rank, not dist.get_rank(): a rebuild that failed earlier (a member never arrived) leaves
    # no default group, and the dump that follows rebuilds again.
    epochs = CommEpochs(margs.rank, margs.world_size, backend=TRAINING.backend,
                        timeout=timedelta(minutes=margs.distributed_timeout_minutes),
                        join_timeout=timedelta(seconds=rebuild_timeout_s()))
    epochs.rebuild(epoch, list(members))
    if dist.get_rank() == 0:  # the first member, in the new numbering
        job_store.publish(LAST_EPOCH, epoch)
    return epoch
