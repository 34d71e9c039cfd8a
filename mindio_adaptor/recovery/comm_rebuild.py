"""The one place a recovery rebuilds this process's communicators (stages rebuild_groups and save_dump):
in place when every process is alive and the world unchanged (a fresh backend under each group object,
core/communication/comm_in_place), otherwise a new default group among `members` on the job's store: the one paired with
the controller this rank is registered with (core/job/paired_store), so that after node 0's loss the survivors
meet at the store beside the backup that leads them. Either way under an
epoch no earlier rebuild of the job used, so stale keys of a previous membership can never be read. Every
member counts the rebuilds it took part in (session.next_comm_epoch); a replacement process, which took
part in none, starts from the last epoch the job published in its store (no rebuild runs while it
starts: the others are parked waiting for it)."""
import logging
from datetime import timedelta
from typing import Optional, Sequence

import torch.distributed as dist

from mindio_adaptor.core.communication.comm import CommEpochs, InPlaceUnavailable, StoreUnreachable
from mindio_adaptor.core.job import job_store, paired_store, rehosted_slot
from mindio_adaptor.core.job.job_store import LAYOUT_INPUTS
from mindio_adaptor.core.job.recovery_limits import rebuild_timeout_s

logger = logging.getLogger(__name__)

LAST_EPOCH = "comm/last_epoch"


def continue_epochs_of_the_job(session) -> int:
    """In a replacement process, before its first rebuild: number epochs after the job's last one."""
    session.next_comm_epoch = job_store.read_or(LAST_EPOCH, 0) + 1
    return session.next_comm_epoch


def catch_up_with_the_job(session) -> int:
    """Before a rebuild among ranks of whom only some met in a world of their own since (the savers of a
    scale-in's dump, in their own epoch): number epochs after the job's last one, so all agree."""
    session.next_comm_epoch = max(session.next_comm_epoch, job_store.read_or(LAST_EPOCH, 0) + 1)
    return session.next_comm_epoch


def rebuild_world(session, margs, members: Sequence[int]) -> int:
    """Tear down every group and join a new default group among `members` (global ranks; the new
    rank of each is its index). Returns the epoch used."""
    rehosted_slot.adopt(facts=(LAST_EPOCH, LAYOUT_INPUTS))  # before the store is chosen and the epoch published
    epoch = _next_epoch(session)
    _epochs(session, margs).rebuild(epoch, list(members))
    session.comm_reinits_in_place = 0  # fresh group objects: every spare backend type is free again
    _publish(epoch)
    return epoch


def reinitialize_world_in_place(session, margs) -> Optional[int]:
    """Every process alive, the same world: a fresh backend under each of this process's group objects
    (core/communication/comm_in_place), so Megatron's references stay right. Returns the epoch used, or None when
    that cannot apply here (the caller rebuilds fully; every rank decides alike, from the same facts)."""
    epoch = session.next_comm_epoch
    try:
        _epochs(session, margs).reinitialize_in_place(epoch, range(margs.world_size),
                                                      session.comm_reinits_in_place)
    except InPlaceUnavailable as why:  # raised before the epoch's first key: the rebuild may take it
        logger.info("communicators not re-initialised in place (%s): rebuilding them", why)
        return None
    except Exception:
        session.next_comm_epoch = epoch + 1
        raise
    session.next_comm_epoch = epoch + 1
    session.comm_reinits_in_place += 1
    _publish(epoch)
    return epoch


def _next_epoch(session) -> int:
    epoch = session.next_comm_epoch
    session.next_comm_epoch += 1
    return epoch


def _epochs(session, margs) -> CommEpochs:
    # margs.rank, not dist.get_rank(): a rebuild that failed earlier (a member never arrived) leaves
    # no default group, and the dump that follows rebuilds again.
    try:
        host, port = paired_store.choose()
    except paired_store.NoStoreAnswers as exc:  # a rebuild that cannot meet anywhere fails as one whose store died
        raise StoreUnreachable(str(exc)) from exc
    session.comm_store = f"{host}:{port}"
    return CommEpochs(margs.rank, margs.world_size, host=host, port=port, backend=session.thread.backend,
                      timeout=timedelta(minutes=margs.distributed_timeout_minutes),
                      join_timeout=timedelta(seconds=rebuild_timeout_s()))


def _publish(epoch: int) -> None:
    if dist.get_rank() == 0:  # the first member, in the new numbering
        job_store.publish(LAST_EPOCH, epoch)
