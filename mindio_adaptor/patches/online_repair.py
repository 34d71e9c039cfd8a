"""Online repair (--enable-hbmfault-repair) and the survivors' side of process replacement
(--enable-worker-reboot) on Megatron: the clean, rebuild_group, repair and rollback handlers.

After the controller's STOP every rank's communicators are broken (patches/exception_loop) and every
training thread is parked. Then, on every training thread:
  clean     online repair: the groups are rebuilt now (as rebuild_group). Process replacement: only the
            step's gradients are dropped; the groups wait for the replacement process.
  rebuild_group  the world group is rebuilt under a new epoch (patches/comm_rebuild), Megatron's
            parallel state is initialised again with the call it was first initialised with, and every
            reference to an old group (DDP buffers and bucket groups, the optimizer, configs) is
            re-pointed to its new counterpart (core/group_repoint), matched through parallel_state's
            globals. In a replacement process the old groups are those of the fake backend.
  repair    the shard's manifest and the repair step's non-sharded state, then the optimizer shard
            (fp32 main params, Adam moments and steps), go point to point from the live replica peer the
            controller chose to each rank being repaired (core/shard_transfer).
  rollback  a rank behind the repair step (a replacement; a rank whose step the other replica instance
            completed) first takes the received state as its own (patches/repair_state). Model params
            are re-derived from the main params on every rank (each writes its shard, then the
            instance all-gathers), RNG states go back to the repair step's snapshot, the data iterator
            is positioned after the repair step (an interrupted next step's micro-batches are given
            again), Megatron's timers and rerun state are reset; the training thread then computes the
            step after the repair step (exception_loop).
"""
import logging
import pickle
import time

import torch
import torch.distributed as dist

from mindio_adaptor.core.group_repoint import repoint
from mindio_adaptor.core.replay_iterator import ReplayableIterator
from mindio_adaptor.core.shard_transfer import recv_shard, send_shard
from mindio_adaptor.core.enums import RepairType
from mindio_adaptor.patches import checkpoint_reload, process_replacement, repair_state, step_snapshot
from mindio_adaptor.patches.comm_rebuild import rebuild_world
from mindio_adaptor.patches.exception_loop import TIMELINE, TRAINING
from mindio_adaptor.patches.training import current_iteration
from mindio_adaptor.patches.training_state import STATE, distributed_optimizers, shard_state_tensors

logger = logging.getLogger(__name__)

HANDLER_TIMEOUT_S = 30 * 60.0  # the controller's action time limit ends a stuck handler first


class RepairError(RuntimeError):
    pass


def register_handlers():
    from mindio_adaptor.ttp import processor

    processor.tft_register_clean_handler(lambda is_uce, args, ctx: TRAINING.run_parked(clean, HANDLER_TIMEOUT_S))
    processor.tft_register_rebuild_group_handler(
        lambda fault_ranks, args, ctx: TRAINING.run_parked(rebuild_groups, HANDLER_TIMEOUT_S))
    processor.tft_register_repair_handler(
        lambda step, need_rebuild, error_ranks, info, args, ctx:
        TRAINING.run_parked(lambda: repair(step, info), HANDLER_TIMEOUT_S))
    processor.tft_register_rollback_handler(
        lambda step, args, ctx: TRAINING.run_parked(lambda: rollback(step), HANDLER_TIMEOUT_S))


# --- clean: rebuild the groups, re-point Megatron ---------------------------------------------------

def _megatron_groups(ps) -> dict:
    """parallel_state's globals that hold process groups: name -> group (or list of groups)."""
    out = {}
    for name, value in vars(ps).items():
        if isinstance(value, dist.ProcessGroup):
            out[name] = value
        elif isinstance(value, list) and value and all(isinstance(v, dist.ProcessGroup) for v in value):
            out[name] = list(value)
    return out


def _old_to_new(old: dict, new: dict) -> dict:
    mapping = {}
    for name, value in old.items():
        if name not in new:
            raise RepairError(f"parallel_state.{name} existed before the rebuild and not after it")
        befores = value if isinstance(value, list) else [value]
        afters = new[name] if isinstance(value, list) else [new[name]]
        for i, before in enumerate(befores):
            mapping.setdefault(before, afters[i])
    return mapping


def clean():
    """Online repair: rebuild the groups now. Process replacement: only drop this step's gradients;
    the groups are rebuilt at REBUILD_GROUP, once the replacement process is there to join them."""
    from mindio_adaptor.patches.fault_injection import fire
    from mindio_adaptor.ttp import processor

    fire("repair", current_iteration())
    if processor.tft_get_repair_type() != "recover":
        return rebuild_groups()
    for chunk in STATE.model:
        chunk.zero_grad_buffer()
    logger.info("clean: gradients dropped; the groups are rebuilt when the replacement has joined")
    TIMELINE.mark("cleaned")
    return 0


def rebuild_groups():
    from megatron.core import parallel_state as ps

    started = time.monotonic()
    old = _megatron_groups(ps)
    old_world = dist.group.WORLD
    epoch = rebuild_world(range(dist.get_world_size()))
    process_replacement.fake_world_ended()  # from here on, collectives of a replacement are real
    ps.destroy_model_parallel()
    init_args, init_kwargs = STATE.model_parallel_init
    ps.initialize_model_parallel(*init_args, **init_kwargs)
    mapping = _old_to_new(old, _megatron_groups(ps))
    mapping.setdefault(old_world, dist.group.WORLD)
    del old, old_world  # only the mapping may still hold the old groups
    report = repoint(mapping, owner_modules=("megatron",))
    if report.in_frames:
        logger.info("%d old group reference(s) remain in function locals (the interrupted step's "
                    "frames, never resumed): %s", len(report.in_frames), sorted(set(report.in_frames)))
    if report.immutable:
        raise RepairError(f"old process groups are still held in {sorted(set(report.immutable))}; "
                          f"training on them would fail")
    for chunk in STATE.model:
        chunk.zero_grad_buffer()
    logger.info("communicators rebuilt (epoch %d), %d group references re-pointed in %.2f s", epoch,
                report.replaced, time.monotonic() - started)
    TIMELINE.mark("groups rebuilt", f"epoch {epoch}")
    return 0


# --- repair: the faulty rank receives its shard ------------------------------------------------------

def repair(step: int, info: dict):
    if info["repair_type"] == RepairType.LOAD_CKPT:
        return checkpoint_reload.reload(step)
    started = time.monotonic()
    me = dist.get_rank()
    if process_replacement.awaiting_state():
        process_replacement.materialize_optimizer_state(STATE.optimizer)
    tensors = shard_state_tensors(STATE.optimizer)
    _exchange_step_state(step, info, me, tensors)
    for src, dst in zip(info["src"], info["dst"]):
        if me == src:
            sent = send_shard(tensors, dst)
            TIMELINE.mark("shard sent", f"{sent} bytes to rank {dst} in {time.monotonic() - started:.2f} s")
        elif me == dst:
            moved = recv_shard(tensors, src)
            logger.info("repair of step %d: received my optimizer shard (%d tensors, %d bytes) from rank %d "
                        "in %.2f s", step, len(tensors), moved, src, time.monotonic() - started)
            TIMELINE.mark("shard received", f"{moved} bytes from rank {src} in {time.monotonic() - started:.2f} s")
    return 0


def _manifest(tensors) -> list:
    return [(tuple(t.shape), str(t.dtype)) for t in tensors]


def _exchange_step_state(step: int, info: dict, me: int, tensors) -> None:
    """Before the shard itself, every source sends the shard's manifest (shapes, dtypes), checked by
    the receiver so that a mismatch is an error naming it rather than a transport failure, and the
    repair step's non-sharded state (a few KB), which a replacement process takes as its own."""
    for src, dst in zip(info["src"], info["dst"]):
        if me == src:
            message = {"manifest": _manifest(tensors), "state": repair_state.state_to_send(step)}
            payload = torch.frombuffer(bytearray(pickle.dumps(message)), dtype=torch.uint8)
            dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst)
            dist.send(payload, dst)
        elif me == dst:
            size = torch.zeros(1, dtype=torch.int64)
            dist.recv(size, src)
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
            dist.recv(payload, src)
            message = pickle.loads(payload.numpy().tobytes())
            if message["manifest"] != _manifest(tensors):
                raise RepairError(f"rank {src}'s optimizer shard does not match this rank's: "
                                  f"{len(message['manifest'])} tensors {message['manifest'][:4]}... vs "
                                  f"{len(tensors)} tensors {_manifest(tensors)[:4]}...")
            if repair_state.is_behind(step):
                repair_state.keep_received(message["state"])


# --- rollback ------------------------------------------------------------------------------------------

def rollback(step: int):
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine
    from megatron.training.global_vars import get_timers

    if process_replacement.awaiting_state():
        process_replacement.install_received_state(step)
    elif repair_state.is_behind(step):
        repair_state.install_received(step)
    snapshot = step_snapshot.require(step, "roll back to")
    _rederive_model_params()
    step_snapshot.restore_rng(snapshot.rng)
    replayed = sum(it.position_after(step) for it in REPLAY.values())
    for name, timer in get_timers()._timers.items():
        if name not in _TIMERS_RUNNING_BEFORE_STEP:  # started by the interrupted step, never stopped
            timer._started = False
    get_rerun_state_machine().state = RerunState.NOT_RUNNING_YET
    logger.info("rollback to step %d: params re-derived, RNG restored, %d micro-batch(es) to replay", step,
                replayed)
    TIMELINE.mark("rolled back", f"to step {step}")
    return 0


def _rederive_model_params():
    """Each rank writes its shard of the main params into the model, then each instance all-gathers."""
    with torch.no_grad():
        for opt in distributed_optimizers(STATE.optimizer):
            opt._copy_main_params_to_model_params()
    for chunk in STATE.model:
        chunk.start_param_sync(force_sync=True)


# --- the data iterator of each step -------------------------------------------------------------------

REPLAY: dict = {}  # id(Megatron's iterator) -> ReplayableIterator
_TIMERS_RUNNING_BEFORE_STEP: set = set()  # e.g. the train loop's interval timer, which always runs


def prepare_step(data_iterator, step: int):
    """At each train_step: note the timers already running, and return the iterator to use."""
    global _TIMERS_RUNNING_BEFORE_STEP
    from megatron.training.global_vars import get_timers

    _TIMERS_RUNNING_BEFORE_STEP = {n for n, t in get_timers()._timers.items() if t._started}
    return replayable(data_iterator, step)


def replayable(data_iterator, step: int):
    """The iterator train_step should use. Megatron hands train_step a RerunDataIterator (it asserts
    so); its source (`.iterable`) is wrapped once in a ReplayableIterator, and the RerunDataIterator
    itself is passed on."""
    if data_iterator is None:
        return None
    if isinstance(data_iterator, list):
        return [replayable(it, step) for it in data_iterator]
    wrapper = REPLAY.get(id(data_iterator))
    if wrapper is None:
        holder = data_iterator if hasattr(data_iterator, "iterable") else None
        if holder is None:
            return data_iterator  # not Megatron's iterator: nothing to replay through
        wrapper = REPLAY[id(data_iterator)] = holder.iterable = ReplayableIterator(holder.iterable)
    wrapper.begin_step(step)
    return data_iterator
