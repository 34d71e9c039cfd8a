"""REPAIR from a replica peer: the shard's manifest and the repair step's non-sharded state, then the
optimizer shard (fp32 main params, Adam moments and steps), go point to point from the live replica
peer the controller chose to each rank being repaired (core/communication/shard_transfer).

The non-sharded state (iteration, data position, FLOPs, scheduler, RNG, lazily computed caches) is
kept by a receiving rank that is behind the repair step: a replacement process (it has no state at
all), and a rank whose update of the repair step was interrupted while the other replica instance
completed it. ROLLBACK installs it (stages/roll_back)."""
import logging
import pickle
import time

import torch
import torch.distributed as dist

from mindio_adaptor.core.communication.shard_transfer import recv_shard, send_shard
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


class RepairError(RuntimeError):
    pass


def repair_from_peer(session, megatron, action) -> int:
    started = time.monotonic()
    step, info, me = action.step, action.repair, dist.get_rank()
    job = session.job
    if session.replacement.awaiting_state:
        megatron.materialize_optimizer_state(job.optimizer)
    tensors = megatron.shard_tensors(job.optimizer)
    _exchange_step_state(session, megatron, step, info, me, tensors)
    for src, dst in info.pairs():
        if me == src:
            sent = send_shard(tensors, dst)
            session.timeline.mark("shard sent", f"{sent} bytes to rank {dst} in {time.monotonic() - started:.2f} s")
        elif me == dst:
            shard_started = time.monotonic()
            moved = recv_shard(tensors, src)
            logger.info("repair of step %d: received my optimizer shard (%d tensors, %d bytes) from rank %d "
                        "in %.3f s (the shard itself %.3f s)", step, len(tensors), moved, src,
                        time.monotonic() - started, time.monotonic() - shard_started)
            session.timeline.mark("shard received", f"{moved} bytes from rank {src} in "
                                  f"{time.monotonic() - started:.2f} s")
    return 0


def manifest(tensors) -> list:
    return [(tuple(t.shape), str(t.dtype)) for t in tensors]


def state_to_send(session, megatron, step: int) -> dict:
    """The repair step's state on a holder (the same on every holder of a shard: data-parallel peers
    share the scheduler and, without --data-parallel-random-init, the RNG)."""
    return {"snapshot": session.snapshot_of(step, "send the state of"),
            # not in the snapshot: a step's evaluation runs after it; a peer gives what it consumed up to the fault
            "consumed_valid_samples": megatron.valid_position(),
            **megatron.step_state(session.job.scheduler, session.job.optimizer)}


def _exchange_step_state(session, megatron, step: int, info, me: int, tensors) -> None:
    """Before the shard itself, every source sends the shard's manifest (shapes, dtypes), checked by
    the receiver so that a mismatch is an error naming it rather than a transport failure, and the
    repair step's non-sharded state (a few KB)."""
    for src, dst in info.pairs():
        if me == src:
            message = {"manifest": manifest(tensors), "state": state_to_send(session, megatron, step)}
            payload = torch.frombuffer(bytearray(pickle.dumps(message)), dtype=torch.uint8)
            dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst)
            dist.send(payload, dst)
        elif me == dst:
            size = torch.zeros(1, dtype=torch.int64)
            dist.recv(size, src)
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
            dist.recv(payload, src)
            message = pickle.loads(payload.numpy().tobytes())
            if message["manifest"] != manifest(tensors):
                raise RepairError(f"rank {src}'s optimizer shard does not match this rank's: "
                                  f"{len(message['manifest'])} tensors {message['manifest'][:4]}... vs "
                                  f"{len(tensors)} tensors {manifest(tensors)[:4]}...")
            if session.is_behind(step):
                session.received = message["state"]


REPAIR_FROM_PEER = Stage("repair from peer", repair_from_peer)
