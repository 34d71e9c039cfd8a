"""The recovery's one window onto the running Megatron job: every read and write of Megatron's state
that a recovery stage makes goes through a function here (arguments, iteration, timers, rerun state,
parallel state, optimizer shard, model params, RNG, data position, checkpoint load and save).

The stages (patches/stages) take this module as a parameter; their unit tests pass an object with the
same functions instead. Megatron is imported inside the functions: importing this module does not
import Megatron.
"""
import contextlib
import logging
import random
import sys
from typing import Any, List

import numpy as np
import torch
import torch.distributed as dist

from mindio_adaptor.core.replica_layout import ATTENTION, MOE
from mindio_adaptor.core.state_reshard import Slot
from mindio_adaptor.patches import checkpoint_writer, uneven_batches
from mindio_adaptor.patches.call_arguments import has_parameter
from mindio_adaptor.patches.recovery_session import StepSnapshot
from mindio_adaptor.patches.training_state import (distributed_optimizer_shard, distributed_optimizers,
                                                    shard_state_tensors)

logger = logging.getLogger(__name__)

KEY_RERUN = "rerun_state_machine_state"  # megatron.core.rerun_state_machine's ShardedObject key
# Answers Megatron computes with a collective the first time they are asked, then caches: a
# replacement asking again would run a collective its peers never run. It takes its peer's answers.
LAZY_CACHES = ("_has_grad_norm_group_cache",)


class MegatronStateError(RuntimeError):
    pass


# --- arguments and iteration ----------------------------------------------------------------------

def args():
    from megatron.training.global_vars import get_args

    return get_args()


def args_if_parsed():
    """Megatron's arguments, or None before it parsed them (get_args() asserts; a DataLoader may
    start before Megatron parses its args)."""
    from megatron.training import global_vars

    return global_vars._GLOBAL_ARGS


def current_iteration() -> int:
    """The iteration being computed, numbered as Megatron's log prints it (1-based). Before train() runs (a
    replacement process joining) 1: megatron-core 0.19 sets curr_iteration to 0 there, 0.12 not at all."""
    return getattr(args(), "curr_iteration", 0) + 1


def set_rank(rank: int, world_size: int = None, local_rank: int = None, margs=None) -> None:
    """Megatron's arguments at this process's rank in a world that changed (a resize, a warm spare taking its
    rank); `margs`: arguments still being parsed, before Megatron holds them."""
    margs = margs if margs is not None else args()
    margs.rank = rank
    if world_size is not None:
        margs.world_size = world_size
    if local_rank is not None:
        margs.local_rank = local_rank


def set_parallel_sizes(data_parallel: int, replicas: int) -> None:
    """Megatron's data-parallel size and distributed-optimizer instance count (the replicas) at a resize."""
    margs = args()
    margs.data_parallel_size = data_parallel
    margs.num_distributed_optimizer_instances = replicas


def set_iteration_state(snapshot: StepSnapshot) -> None:
    """Megatron's arguments at the snapshot's step, as a resume from a checkpoint of it sets them."""
    margs = args()
    margs.iteration = snapshot.iteration
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    margs.num_floating_point_operations_so_far = snapshot.floating_point_operations


def set_data_position(snapshot: StepSnapshot) -> None:
    """The data position and RNG states of the snapshot's step (what a checkpoint of it records)."""
    margs = args()
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    restore_rng(snapshot.rng)


# --- the snapshot of a completed step -------------------------------------------------------------

def rng_states() -> dict:
    from megatron.core import tensor_parallel

    return {"random": random.getstate(), "np": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(),
            "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}


def restore_rng(states: dict) -> None:
    from megatron.core import tensor_parallel

    random.setstate(states["random"])
    np.random.set_state(states["np"])
    torch.set_rng_state(states["torch"])
    torch.cuda.set_rng_state(states["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(states["tracker"])


def _train_loop_flops(default: float) -> float:
    """The train loop keeps its FLOP count in a local (`num_floating_point_operations_so_far` of
    megatron.training.training.train); `args` only has the value the loop started with."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "train" and "num_floating_point_operations_so_far" in frame.f_locals:
            return frame.f_locals["num_floating_point_operations_so_far"]
        frame = frame.f_back
    return default


def snapshot_of_completed_step(step: int) -> StepSnapshot:
    """Called when step `step` is complete (its update and scheduler step done), before the train
    loop's bookkeeping, which is reproduced here: the samples of this step are added to the
    data position and its FLOPs (the closed-form count, exact for unpacked sequences) to the total."""
    from megatron.core import parallel_state as ps
    from megatron.core.num_microbatches_calculator import (get_current_global_batch_size,
                                                           get_current_running_global_batch_size,
                                                           get_num_microbatches)
    from megatron.training.training import num_floating_point_operations

    margs = args()
    batch = (ps.get_data_parallel_world_size() * getattr(margs, "gtp_weight_remat_size", 1)
             * margs.micro_batch_size * get_num_microbatches())
    share = uneven_batches.active()
    if share is not None:  # the loop's count is this rank's share; count_the_whole_batch makes it the step's
        batch = share.split.global_batch_size
    skipped = get_current_global_batch_size() - get_current_running_global_batch_size()
    flops = _train_loop_flops(margs.num_floating_point_operations_so_far)
    return StepSnapshot(step, margs.consumed_train_samples + batch, margs.skipped_train_samples + skipped,
                        flops + num_floating_point_operations(margs, batch), rng_states())


# --- timers and the rerun state machine -------------------------------------------------------------

def running_timers() -> set:
    from megatron.training.global_vars import get_timers

    return {name for name, timer in get_timers()._timers.items() if timer._started}


def stop_timers(keep: frozenset = frozenset()) -> None:
    """Mark every timer not in `keep` stopped: the interrupted step started them and never stops them."""
    from megatron.training.global_vars import get_timers

    for name, timer in get_timers()._timers.items():
        if name not in keep:
            timer._started = False


def reset_rerun_state() -> None:
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine

    get_rerun_state_machine().state = RerunState.NOT_RUNNING_YET


# --- parallel state -------------------------------------------------------------------------------

def process_groups() -> dict:
    """parallel_state's globals that hold process groups: name -> group (or list of groups)."""
    from megatron.core import parallel_state as ps

    out = {}
    for name, value in vars(ps).items():
        if isinstance(value, dist.ProcessGroup):
            out[name] = value
        elif isinstance(value, list) and value and all(isinstance(v, dist.ProcessGroup) for v in value):
            out[name] = list(value)
    return out


def reinitialize_parallel_state(init_call, replica_layout: bool = True) -> None:
    """Megatron's parallel state again, on the current default group. With replica_layout (an online
    repair: the same job again) through the patched initialize_model_parallel, which re-lays the
    optimizer instances along the replica layout (patches/parallel_state); without it (the savers'
    world of a dump: one optimizer instance) through Megatron's own."""
    from megatron.core import parallel_state as ps

    init_args, init_kwargs = init_call
    ps.destroy_model_parallel()
    initialize = ps.initialize_model_parallel
    if not replica_layout:
        initialize = getattr(initialize, "__wrapped__", initialize)
    initialize(*init_args, **init_kwargs)


def single_instance_init_call(margs) -> tuple:
    """The initialize_model_parallel call of the job with ONE optimizer instance (the savers' world)."""
    return ((margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size,
             margs.virtual_pipeline_model_parallel_size),
            dict(context_parallel_size=margs.context_parallel_size, num_distributed_optimizer_instances=1,
                 expert_model_parallel_size=margs.expert_model_parallel_size,
                 expert_tensor_parallel_size=margs.expert_tensor_parallel_size,
                 distributed_timeout_minutes=margs.distributed_timeout_minutes,
                 order="tp-cp-ep-dp-pp" if not margs.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
                 create_gloo_process_groups=gloo_groups_wanted(margs)))


def gloo_groups_wanted(margs) -> bool:
    """--disable-gloo-process-groups: `enable_gloo_process_groups` until megatron-core 0.12, later
    `use_gloo_process_groups`."""
    return getattr(margs, "use_gloo_process_groups", getattr(margs, "enable_gloo_process_groups", True))


def point_optimizer_at_single_instance(optimizer, margs) -> None:
    """The optimizer's data-parallel group is the savers' one, and it is instance 0; an MoE job's expert
    optimizer takes the savers' expert data-parallel group."""
    from megatron.core import parallel_state as ps

    gloo = gloo_groups_wanted(margs)
    for opt in distributed_optimizers(optimizer):
        if _optimizes_experts(opt):
            opt.data_parallel_group = ps.get_expert_data_parallel_group()
            if gloo:
                opt.data_parallel_group_gloo = ps.get_expert_data_parallel_group_gloo()
        else:
            opt.data_parallel_group = ps.get_data_parallel_group(with_context_parallel=True)
            if gloo:
                opt.data_parallel_group_gloo = ps.get_data_parallel_group_gloo(with_context_parallel=True)
        opt.distributed_optimizer_instance_id = 0


def _optimizes_experts(opt) -> bool:
    """Megatron builds the expert optimizer over the DDP's expert buffers, whose parameters it marks
    allreduce=False (expert-parallel: reduced over the expert data-parallel ranks only)."""
    return any(not getattr(param, "allreduce", True) for buffer in opt.buffers for param in buffer.params)


def replica_peers_group():
    """The group of this rank's optimizer shard's holders (one per optimizer instance)."""
    from megatron.core import parallel_state as ps

    if hasattr(ps, "get_inter_distributed_optimizer_instance_group"):
        return ps.get_inter_distributed_optimizer_instance_group()
    return ps.get_inter_partial_data_parallel_group()  # its name until megatron-core 0.13


def data_parallel_group():
    """This rank's whole data-parallel group (every optimizer instance of it, with context parallelism)."""
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_group(with_context_parallel=True)


# --- loss lines ------------------------------------------------------------------------------------

def world_size() -> int:
    return dist.get_world_size()


def is_last_rank() -> bool:
    """The rank that prints Megatron's loss lines (print_rank_last)."""
    return dist.get_rank() == dist.get_world_size() - 1


def prints_loss_line(step: int, is_first_iteration: bool = False) -> bool:
    """Whether Megatron's training_log prints a line for `step`."""
    return step % args().log_interval == 0 or bool(is_first_iteration)


def detached_losses(losses_reduced) -> list:
    """train_step's forward-backward output (one dict of loss tensors per micro-batch; before megatron-core
    0.16 a value may be a (loss, tokens) pair), kept aside."""
    def detached(value):
        if isinstance(value, (tuple, list)):
            return tuple(part.detach().clone() for part in value)
        return value.detach().clone()

    return [{key: detached(value) for key, value in micro_batch.items()} for micro_batch in losses_reduced or ()]


def gather_objects(obj) -> list:
    """Every rank's `obj`, in rank order (a collective of the whole job)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone


def reduce_step_losses(model, local: list) -> dict:
    """The reduction train_step makes of a step's losses for display, done again from this rank's part:
    token-weighted losses summed over the data-parallel group, per-micro-batch means kept local."""
    reduced = {}
    for key in local[0]:
        if isinstance(local[0][key], tuple):  # pairs the loss function reduced already (before 0.16)
            pairs = [micro_batch[key] for micro_batch in local]
            reduced[key] = float(sum(pair[0] for pair in pairs) / sum(pair[1] for pair in pairs))
            continue
        parts = [micro_batch[key].view(-1) for micro_batch in local]
        if parts[0].numel() == 2:
            total = torch.vstack(parts).sum(dim=0)
            dist.all_reduce(total, group=_loss_reduction_group(model))
            reduced[key] = float(total[0] / total[1])
        else:
            reduced[key] = float(torch.cat(parts).mean())
    return reduced


def _loss_reduction_group(model):
    from megatron.training import training

    if not hasattr(training, "ProcessGroupCollection"):  # megatron-core 0.12
        from megatron.core import parallel_state as ps

        return ps.get_data_parallel_group(with_context_parallel=True)
    pg_collection = (training.get_attr_wrapped_model(model[0], "pg_collection")
                     or training.ProcessGroupCollection.use_mpu_process_groups())
    return getattr(pg_collection, "dp_cp_gtp_remat", None) or pg_collection.dp_cp


def log_step_line(model, optimizer, step: int, reduced: dict, grad_norm, num_zeros, skipped: bool) -> None:
    """Megatron's training_log of `step` from its recorded values, on every rank (it has collectives)."""
    from megatron.training import training

    def as_logged(stat):  # train_step's max over the model-parallel group: a float32's value
        return None if stat is None else torch.tensor([stat], dtype=torch.float32).item()

    values = dict(
        loss_dict={key: torch.tensor(value, dtype=torch.float) for key, value in reduced.items()},
        total_loss_dict={}, iteration=step, loss_scale=optimizer.get_loss_scale().item(), report_memory_flag=False,
        skipped_iter=int(skipped), grad_norm=as_logged(grad_norm), num_zeros_in_grad=as_logged(num_zeros),
        params_norm=training.calc_params_l2_norm(model) if args().log_params_norm else None,
        max_attention_logit=None, **_learning_rates(training, optimizer))
    if hasattr(training, "ProcessGroupCollection"):
        values["pg_collection"] = training.get_attr_wrapped_model(model[0], "pg_collection")
    # by name: the parameters moved between megatron-core versions, and 0.12 has a decoupled learning rate
    training.training_log(**{name: value for name, value in values.items()
                             if has_parameter(training.training_log, name)})


def _learning_rates(training, optimizer) -> dict:
    if hasattr(training, "get_canonical_lr_for_logging"):
        return {"learning_rate": training.get_canonical_lr_for_logging(optimizer.param_groups)}
    rates = {"learning_rate": None, "decoupled_learning_rate": None}  # megatron-core 0.12's train loop
    for group in optimizer.param_groups:
        rates["decoupled_learning_rate" if group["is_decoupled_lr"] else "learning_rate"] = group["lr"]
    return rates


# --- model and optimizer --------------------------------------------------------------------------

def drop_gradients(model) -> None:
    for chunk in model:
        chunk.zero_grad_buffer()


def rederive_model_params(model, optimizer) -> None:
    """Each rank writes its shard of the main params into the model, then each instance all-gathers."""
    with torch.no_grad():
        for opt in distributed_optimizers(optimizer):
            opt._copy_main_params_to_model_params()
    for chunk in model:
        chunk.start_param_sync(force_sync=True)


def shard_tensors(optimizer) -> list:
    return shard_state_tensors(optimizer)


def shard_tensors_by_optimizer(optimizer) -> dict:
    """This rank's shard of the dense optimizer and of the expert optimizer, by replica_layout's
    optimizer type (their holders differ under expert parallelism)."""
    shards = {}
    for opt in distributed_optimizers(optimizer):
        kind = MOE if _optimizes_experts(opt) else ATTENTION
        shards.setdefault(kind, []).extend(distributed_optimizer_shard(opt))
    return shards


def materialize_optimizer_state(optimizer) -> None:
    """A fresh optimizer has no moments yet (Adam creates them at its first step): create them, and
    the step count, so that the shard has the replica peer's layout before it is received."""
    for dopt in distributed_optimizers(optimizer):
        if dopt.init_state_fn is not None:
            dopt.init_state_fn(dopt.optimizer, dopt.config)
        for group in dopt.optimizer.param_groups:
            for param in group["params"]:
                state = dopt.optimizer.state[param]
                if state and "step" not in state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)


# The optimizer state's kinds, each sharded over its own group: the dense parameters' over the data-parallel
# group, the experts' (expert parallelism) over the expert data-parallel group.
STATE_KINDS = ("dense", "expert")


def optimizer_state_slots(model, optimizer) -> dict:
    """This rank's part of every parameter's optimizer state, as core/state_reshard addresses it, by the kind of
    state ("dense", "expert": each sharded over its own data-parallel group, `state_group`): for each model
    parameter in its shard, the first of the parameter's (flattened) elements it holds and the fp32 main param
    and optimizer moments over them, keyed by the optimizer's index and the parameter's name. The step count
    (a 0-dim tensor) is not in it: it comes with the optimizer's own state dict."""
    names = {param: f"{index}.{name}" for index, chunk in enumerate(model) for name, param in chunk.named_parameters()}
    slots = {kind: {} for kind in STATE_KINDS}
    for index, dopt in enumerate(distributed_optimizers(optimizer)):
        kind = slots["expert" if _optimizes_experts(dopt) else "dense"]
        for buffer_ranges in dopt.gbuf_ranges:
            for bucket_ranges in buffer_ranges.values():
                for bucket in bucket_ranges:
                    for param, ranges in bucket["param_map"].items():
                        tensors = dopt._get_main_param_and_optimizer_states(param)
                        kind[f"{index}.{names[param]}"] = Slot(ranges["param"].start, {
                            name: t for name, t in tensors.items() if t.dim() > 0})
    return slots


def state_group(kind: str):
    """The whole group (every optimizer instance of it) over which a kind of optimizer state is sharded."""
    from megatron.core import parallel_state as ps

    return ps.get_expert_data_parallel_group() if kind == "expert" else data_parallel_group()


def optimizer_common_state(optimizer):
    """The optimizer's state that every rank of a data-parallel group has alike (param groups, step count,
    grad scaler; Megatron's optimizer state dict without the parameter state)."""
    return optimizer.state_dict()


def install_optimizer_common_state(optimizer, state) -> None:
    """A freshly built optimizer takes `state` (optimizer_common_state of a peer) and allocates its moments,
    to be filled from the peers."""
    optimizer.load_state_dict(state)


def _optimizers(optimizer) -> list:
    """The optimizer and, for a chain, each optimizer in it, in a fixed order."""
    return [] if optimizer is None else [optimizer, *getattr(optimizer, "chained_optimizers", [])]


def step_state(scheduler, optimizer) -> dict:
    """The non-sharded state a replica peer sends beside the shard: the scheduler and the lazily
    computed caches (the same on every holder of a shard)."""
    return {"scheduler": scheduler.state_dict() if scheduler is not None else None,
            "lazy_caches": [{name: getattr(opt, name) for name in LAZY_CACHES if hasattr(opt, name)}
                            for opt in _optimizers(optimizer)]}


def install_step_state(state: dict, scheduler, optimizer) -> None:
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    for opt, caches in zip(_optimizers(optimizer), state["lazy_caches"]):
        for name, value in caches.items():
            setattr(opt, name, dict(value))


# --- data position --------------------------------------------------------------------------------

def build_datasets(provider) -> tuple:
    """Megatron's train, valid and test datasets from `provider` (build_train_valid_test_datasets, as patched)."""
    from megatron.training import training

    return training.build_train_valid_test_datasets(provider)


def iterator_at_sample(old, who: str):
    """A new iterator over `old`'s dataset from sample args.consumed_train_samples (Megatron's own
    sampler positions it, as a resume from a checkpoint does); `old`'s worker processes are shut down."""
    # the loader builder as training binds it (from megatron.legacy.data in 0.12, megatron.training.datasets later)
    from megatron.training.training import build_pretraining_data_loader, cyclic_iter

    margs = args()
    if margs.dataloader_type not in ("single", "cyclic"):
        raise RuntimeError(f"{who}: cannot position a '{margs.dataloader_type}' data loader at sample "
                           f"{margs.consumed_train_samples}")
    dataset = getattr(old, "_dataset", None)
    if dataset is None:
        raise RuntimeError(f"{who}: the train data iterator does not expose its dataset; cannot position it "
                           f"at sample {margs.consumed_train_samples}")
    if uneven_batches.active():
        loader = uneven_batches.data_loader(margs, dataset, margs.consumed_train_samples, who)
    else:
        loader = build_pretraining_data_loader(dataset, margs.consumed_train_samples)
    if hasattr(old, "_shutdown_workers"):
        old._shutdown_workers()
    logger.info("%s: data iterator positioned at sample %d", who, margs.consumed_train_samples)
    return iter(loader) if margs.dataloader_type == "single" else iter(cyclic_iter(loader))


def position_train_iterators(holder, who: str) -> None:
    """The train data iterator a process gave train() (Megatron's wrapper with its `iterable`; with a virtual
    pipeline, a list of them, one per model chunk; None where a stage reads no data), each started again at
    sample args.consumed_train_samples. A process that ran no train_step yet (no replay wrapper) needs this."""
    for one in holder if isinstance(holder, (list, tuple)) else [holder]:
        if one is None:
            continue
        if not hasattr(one, "iterable"):
            raise RuntimeError(f"{who}: cannot position its train data iterator ({type(one).__name__}) at sample "
                               f"{args().consumed_train_samples}")
        one.iterable = iterator_at_sample(one.iterable, who)


# --- checkpoints ----------------------------------------------------------------------------------

def load_checkpoint_of_step(model, optimizer, scheduler, step: int) -> tuple:
    """Megatron's load_checkpoint of the checkpoint of `step` under --save (the reported step, not the
    tracker's); returns (iteration, FLOPs so far)."""
    from megatron.training.checkpointing import load_checkpoint

    margs = args()
    pinned, margs.ckpt_step = getattr(margs, "ckpt_step", None), step
    try:
        return load_checkpoint(model, optimizer, scheduler, load_arg="save")
    finally:
        margs.ckpt_step = pinned


# --- building the model again at another size (a resize) -----------------------------------------

# Set on the model config by train() (and read by Megatron's schedules from the model's own config).
TRAIN_LOOP_CONFIG_FIELDS = ("grad_scale_func", "timers", "no_sync_func", "grad_sync_func", "param_sync_func",
                            "finalize_model_grads_func")


def microbatch_calculator():
    """Megatron's global micro-batch calculator: (reconfigure, get_num_microbatches)."""
    from megatron.core.num_microbatches_calculator import get_num_microbatches, reconfigure_num_microbatches_calculator

    return reconfigure_num_microbatches_calculator, get_num_microbatches


def setup_model_and_optimizer_again(setup_call, old_model, root, step) -> tuple:
    """Megatron's setup_model_and_optimizer called again as the job called it (`setup_call`, recorded at
    start), with the process groups as they are now, loaded from the checkpoint of `step` under `root` (None:
    from nothing); what train() set on the old model's config is set on the new one. Returns (model,
    optimizer, scheduler)."""
    from megatron.core.utils import get_model_config
    from megatron.training import training

    call_args, call_kwargs = with_current_groups(*setup_call)
    with _loading_from(root, step):
        model, optimizer, scheduler = training.setup_model_and_optimizer(*call_args, **call_kwargs)
    old_config, new_config = get_model_config(old_model[0]), get_model_config(model[0])
    for name in TRAIN_LOOP_CONFIG_FIELDS:
        setattr(new_config, name, getattr(old_config, name, None))
    if old_config is not new_config and type(old_config) is type(new_config):
        # pretrain() hands its config object to train() (0.12 to 0.18 set the loop's fields on that one, and
        # a returned process enters train() only after this rebuild): both objects share one state.
        old_config.__dict__ = new_config.__dict__
    return model, optimizer, scheduler


# Megatron caches checkpoint strategies (which hold the data-parallel group) in the checkpointing context.
CACHED_CHECKPOINT_STRATEGIES = ("save_strategy", "load_strategy")


def with_current_groups(call_args, call_kwargs) -> tuple:
    """The recorded setup call with Megatron's process groups as they are now: pretrain() passes the
    groups of the start as a ProcessGroupCollection, and its checkpointing context may hold strategies
    built on them (the context is the one pretrain() keeps: it is cleared, not replaced). Its DDP
    config takes the current optimizer instance count (the replicas, core/scale_in_plan)."""
    call_kwargs = dict(call_kwargs)
    if "pg_collection" in call_kwargs:
        from megatron.core.process_groups_config import ProcessGroupCollection

        call_kwargs["pg_collection"] = ProcessGroupCollection.use_mpu_process_groups()
    ddp_config = getattr(call_kwargs.get("cfg_container"), "ddp", None)
    if ddp_config is not None:  # built from the arguments at start: the replica count may have fallen since
        ddp_config.num_distributed_optimizer_instances = args().num_distributed_optimizer_instances
    context = call_kwargs.get("checkpointing_context")
    for key in CACHED_CHECKPOINT_STRATEGIES:
        if isinstance(context, dict):
            context.pop(key, None)
    return call_args, call_kwargs


@contextlib.contextmanager
def _loading_from(root, step):
    """Megatron's arguments while a model is built again (setup_model_and_optimizer) from the checkpoint of
    `step` under `root` (None: from nothing), as a full load of it: the optimizer and RNG too, not a finetune.
    The consumed sample counts are zero meanwhile (megatron-core 0.12's load asserts that no sample was
    consumed yet, and sets them from the checkpoint); where the load set none, they come back as they were."""
    margs = args()
    names = ("load", "ckpt_step", "finetune", "no_load_optim", "no_load_rng", "pretrained_checkpoint")
    counts = ("consumed_train_samples", "skipped_train_samples", "consumed_valid_samples")
    pinned = {name: getattr(margs, name, None) for name in names}
    consumed = {name: getattr(margs, name) for name in counts}
    for name, value in zip(names, (root, step, False, False, False, None)):
        setattr(margs, name, value)
    for name in counts:
        setattr(margs, name, 0)
    try:
        yield margs
    finally:
        for name, value in pinned.items():
            setattr(margs, name, value)
        if all(getattr(margs, name) == 0 for name in counts):
            for name, value in consumed.items():
                setattr(margs, name, value)


def save_checkpoint_for_full_job(step: int, model, optimizer, scheduler, flops: float, save_dir: str,
                                 members: List[int], world_size: int) -> None:
    """Megatron's save_checkpoint into save_dir, synchronously (the caller publishes it next, and the
    process may exit right after: --async-save would only schedule the write), with the rerun state
    every rank of the full job reads at resume."""
    from megatron.training.checkpointing import save_checkpoint

    margs = args()
    root, async_save = margs.save, margs.async_save
    # This process's earlier saves ended or were abandoned at the fault: what they left in the writer's
    # queue would otherwise become this checkpoint's metadata.
    checkpoint_writer.discard_stale_write_results(f"before the save of step {step}")
    margs.save, margs.async_save = save_dir, False
    try:
        with _rerun_state_for_every_rank(members, world_size), _experts_on_the_current_groups(model):
            save_checkpoint(step, model, optimizer, scheduler, flops, checkpointing_context={})
    finally:
        margs.save, margs.async_save = root, async_save


@contextlib.contextmanager
def _experts_on_the_current_groups(model):
    """Megatron's expert MLPs keep the expert data-parallel group they were built with and number their
    tensors' replicas by this rank in it: in the savers' world a saver of the second optimizer instance
    would write its expert weights as a replica, and nobody the main copy. For the save they take the
    savers' group (Megatron before 0.13 asks parallel_state at the save: nothing to change there)."""
    from megatron.core import parallel_state as ps

    experts = [module for chunk in model for module in chunk.modules()
               if type(module).__module__.endswith("transformer.moe.experts") and hasattr(module, "dp_group")]
    kept = [module.dp_group for module in experts]
    for module in experts:
        module.dp_group = ps.get_expert_data_parallel_group()
    try:
        yield
    finally:
        for module, group in zip(experts, kept):
            module.dp_group = group


def unfinalized_async_saves() -> int:
    """How many asynchronous checkpoint saves this rank scheduled and has not finalized yet."""
    from megatron.training import async_utils

    queue = async_utils._async_calls_queue
    return queue.get_num_unfinalized_calls() if queue is not None else 0


def abort_async_checkpoint_writer() -> None:
    """Megatron's own abort of the checkpoint writer (its worker process is killed); the next save
    makes a new queue and writer."""
    from megatron.training import async_utils

    async_utils._async_calls_queue.close(abort=True)
    async_utils._async_calls_queue = None


@contextlib.contextmanager
def _rerun_state_for_every_rank(members: List[int], world_size: int):
    """Megatron (from 0.13 at the latest) saves its rerun state machine as one object per global rank, and a
    resumed rank reads the one at its own rank: every rank of the job needs one, savers or not. Each saver writes its
    own rank's; the saver of new rank 0 also writes the others' as copies of its own (between steps
    with no rerun pending, which is checked, the objects of all ranks are equal)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.rerun_state_machine import RerunState, get_rerun_state_machine

    machine = get_rerun_state_machine()
    original, interrupted = machine.state_dict, machine.state
    me = dist.get_rank()  # the new rank, in the savers' group
    if interrupted not in (RerunState.NOT_RUNNING_YET, RerunState.INITIAL_RUN):
        raise MegatronStateError(f"a rerun of a step is pending (rerun state {interrupted.name}): its per-rank "
                                 f"state cannot be restored for the ranks that are gone")

    def state_dict_for_the_full_job(*args, **kwargs):
        result = original(*args, **kwargs)
        if result is None or result.get("sharded") is None or len(result["sharded"].global_shape) != 1:
            return result  # megatron-core 0.12: one object per (pp, tp) rank, which the savers have too
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

