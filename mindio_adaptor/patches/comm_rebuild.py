"""The one place a recovery rebuilds this process's communicators (patches/dump, patches/online_repair):
a new default group among `members` on the job's store, under an epoch no earlier rebuild of this
process used, so stale keys of a previous membership can never be read."""
from datetime import timedelta
from typing import Sequence

import torch.distributed as dist

from mindio_adaptor.core.comm import CommEpochs
from mindio_adaptor.patches.exception_loop import TRAINING

_next_epoch = 1


def rebuild_world(members: Sequence[int]) -> int:
    """Tear down every group and join a new default group among `members` (global ranks; the new
    rank of each is its index). Returns the epoch used."""
    global _next_epoch
    from megatron.training.global_vars import get_args

    margs = get_args()
    epoch, _next_epoch = _next_epoch, _next_epoch + 1
    epochs = CommEpochs(dist.get_rank(), margs.world_size, backend=TRAINING.backend,
                        timeout=timedelta(minutes=margs.distributed_timeout_minutes))
    epochs.rebuild(epoch, list(members))
    return epoch
