"""The dying-gasp checkpoint on Megatron: the save_ckpt and rename handlers.

The controller picks one healthy holder per optimizer shard (the savers). The savers leave the
broken communicators, meet in a new process group of their own (core/comm.CommEpochs) and
re-initialise Megatron's parallel state on it as a job with ONE optimizer instance: its data-parallel
size is the shard count, and every saver takes the data-parallel rank equal to its shard index (its
tensor, context and pipeline coordinates unchanged). Megatron's own save_checkpoint then writes a
checkpoint identical to what instance 0 of the full job writes — the same files, the same format
(the run's --ckpt-format), loadable with a stock --load — into a staging directory; the rename
handler publishes it (core/dump_dir). Shards are placed by shard index from the replica layout,
never by the order of a sorted rank list.

Before saving, the data position, FLOP count and RNG states are set back to those of the last
completed step (patches/step_snapshot), which is the only step the controller dumps.
"""
import contextlib
import logging
import time
from typing import Dict, List, Sequence

import torch.distributed as dist

from mindio_adaptor.core import dump_dir
from mindio_adaptor.patches import step_snapshot
from mindio_adaptor.patches.comm_rebuild import rebuild_world
from mindio_adaptor.patches.exception_loop import TIMELINE, TRAINING
from mindio_adaptor.patches.training_state import STATE, distributed_optimizers

logger = logging.getLogger(__name__)

SAVE_TIMEOUT_S = 30 * 60.0  # the reference's dump wait; the controller's action limit usually ends it first
KEY_RERUN = "rerun_state_machine_state"  # megatron.core.rerun_state_machine's ShardedObject key
_save_root = None  # --save as the run started; args.save points into the staging dir while saving


class DumpError(RuntimeError):
    pass


def register_handlers():
    from megatron.training.global_vars import get_args

    from mindio_adaptor.patches.exception_loop import stop_training
    from mindio_adaptor.ttp import processor

    global _save_root
    _save_root = get_args().save
    processor.tft_register_stop_handler(stop_training)
    processor.tft_register_save_ckpt_handler(save_dump)
    processor.tft_register_rename_handler(publish_dump)


def save_dump(step: int, save_info: List[dict], args, ctx):
    """save_ckpt handler, on the savers only: the save itself runs on the parked training thread."""
    return TRAINING.run_parked(lambda: _save(step, save_info), timeout=SAVE_TIMEOUT_S)


def _save(step: int, save_info: List[dict]):
    from megatron.training.global_vars import get_args

    started = time.monotonic()
    snapshot = step_snapshot.require(step, "save")
    if not _save_root:
        raise DumpError("the run has no --save directory: there is nowhere to write the dump")
    margs = get_args()
    async_save = margs.async_save
    savers = _dense_savers(save_info)
    members = dump_world(savers, margs)
    try:
        _enter_dump_world(members, margs)
        staging = _staging_prepared_by_one(step)
        _restore_step_state(snapshot, margs)
        # Written in place and finished before this returns: the rename publishes it next, and the
        # process may exit right after (--async-save would only schedule the write).
        margs.save, margs.async_save = str(staging), False
        from megatron.training.checkpointing import save_checkpoint

        with _rerun_state_for_every_rank(members, margs.world_size):
            save_checkpoint(step, STATE.model, STATE.optimizer, STATE.scheduler,
                            snapshot.floating_point_operations, checkpointing_context={})
    except BaseException:
        dump_dir.discard(_save_root, step)
        raise
    finally:
        margs.save, margs.async_save = _save_root, async_save
    logger.info("dump of step %d: saved my part (savers %s as data-parallel ranks %s) in %.2f s", step,
                savers, list(members), time.monotonic() - started)
    TIMELINE.mark("dump part saved", f"step {step} in {time.monotonic() - started:.2f} s")
    return 0


def publish_dump(step: int, args):
    """rename handler, on one saver once every saver is done."""
    final = dump_dir.publish(_save_root, step)
    logger.info("dump of step %d published: %s is the resume point", step, final)
    TIMELINE.mark("dump published", f"step {step}")
    return 0


def _dense_savers(save_info: List[dict]) -> List[int]:
    types = {entry["type"] for entry in save_info}
    if types - {0}:
        raise DumpError(f"dump with separate expert (MoE) shards is not supported yet (save_info {save_info})")
    return sorted({r for entry in save_info for r in entry["ranks"]})


def dump_world(savers: Sequence[int], margs) -> List[int]:
    """members[new rank] = global rank of the saver that plays it. A new rank is laid out like
    Megatron's own ranks (order tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp) with the data-parallel
    coordinate replaced by the saver's shard index, so Megatron's re-initialisation on the savers
    gives each one its tensor/pipeline position and the data-parallel rank of its shard."""
    if margs.expert_model_parallel_size > 1:
        raise DumpError("dump with expert parallelism (--expert-model-parallel-size > 1) is not supported yet")
    tp, cp, pp = margs.tensor_model_parallel_size, margs.context_parallel_size, margs.pipeline_model_parallel_size
    dp = margs.data_parallel_size
    shards = dp // margs.num_distributed_optimizer_instances
    dp_before_pp = not getattr(margs, "use_tp_pp_dp_mapping", False)
    slots: Dict[int, int] = {}
    for rank in savers:
        t, c = rank % tp, (rank // tp) % cp
        p = rank // (tp * cp * dp) if dp_before_pp else (rank // (tp * cp)) % pp
        shard = STATE.layout.set_of(rank).shard_of(rank)
        new = t + tp * (c + cp * ((shard + shards * p) if dp_before_pp else (p + pp * shard)))
        if new in slots:
            raise DumpError(f"savers {slots[new]} and {rank} both hold shard {shard} at tp {t} cp {c} pp {p}")
        slots[new] = rank
    size = shards * tp * cp * pp
    missing = [n for n in range(size) if n not in slots]
    if missing:
        raise DumpError(f"savers {list(savers)} leave {len(missing)} of {size} (tp, cp, pp, shard) positions "
                        f"without a saver")
    return [slots[n] for n in range(size)]


def _enter_dump_world(members: List[int], margs):
    """Leave every broken group, meet the other savers, and re-initialise Megatron's parallel state
    on them with one optimizer instance; point the optimizer at the new data-parallel group."""
    from megatron.core import parallel_state as ps

    rebuild_world(members)
    ps.destroy_model_parallel()
    initialize = getattr(ps.initialize_model_parallel, "__wrapped__", ps.initialize_model_parallel)
    initialize(margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size,
               margs.virtual_pipeline_model_parallel_size, context_parallel_size=margs.context_parallel_size,
               num_distributed_optimizer_instances=1,
               distributed_timeout_minutes=margs.distributed_timeout_minutes,
               order="tp-cp-ep-dp-pp" if not margs.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
               create_gloo_process_groups=margs.use_gloo_process_groups)
    for opt in distributed_optimizers(STATE.optimizer):
        opt.data_parallel_group = ps.get_data_parallel_group(with_context_parallel=True)
        if margs.use_gloo_process_groups:
            opt.data_parallel_group_gloo = ps.get_data_parallel_group_gloo(with_context_parallel=True)
        opt.distributed_optimizer_instance_id = 0


@contextlib.contextmanager
def _rerun_state_for_every_rank(members: List[int], world_size: int):
    """Megatron saves its rerun state machine as one object per global rank, and a resumed rank reads
    the one at its own rank: every rank of the job needs one, savers or not. Each saver writes its
    own rank's; the saver of new rank 0 also writes the others' as copies of its own (between steps
    with no rerun pending, which is checked, the objects of all ranks are equal)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine

    machine = get_rerun_state_machine()
    original, interrupted = machine.state_dict, machine.state
    me = dist.get_rank()  # the new rank, in the savers' group
    if interrupted not in (RerunState.NOT_RUNNING_YET, RerunState.INITIAL_RUN):
        raise DumpError(f"a rerun of a step is pending (rerun state {interrupted.name}): its per-rank state "
                        f"cannot be restored for the ranks that are gone")

    def state_dict_for_the_full_job(*args, **kwargs):
        result = original(*args, **kwargs)
        if result is None or result.get("sharded") is None:
            return result
        data = result["sharded"].data
        result["sharded"] = ShardedObject(KEY_RERUN, data, (world_size,), (members[me],))
        if me == 0:
            result["mindio_other_ranks"] = [ShardedObject(KEY_RERUN, data, (world_size,), (r,))
                                            for r in range(world_size) if r not in members]
        return result

    # The fault interrupted a step (INITIAL_RUN); the checkpoint is of the step before, when the
    # machine was between steps.
    machine.state_dict, machine.state = state_dict_for_the_full_job, RerunState.NOT_RUNNING_YET
    try:
        yield
    finally:
        machine.state_dict, machine.state = original, interrupted


def _staging_prepared_by_one(step: int):
    """One saver empties the staging directory; the others wait for it (they may share the file
    system), so no saver ever deletes another's files."""
    if dist.get_rank() == 0:
        dump_dir.prepare_staging(_save_root, step)
    dist.barrier()
    return dump_dir.staging_root(_save_root, step)


def _restore_step_state(snapshot, margs):
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    step_snapshot.restore_rng(snapshot.rng)
