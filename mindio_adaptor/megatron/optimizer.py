"""The model's gradients and params, and the distributed optimizer's shards, common state and step state."""
import torch

from mindio_adaptor.core.layout.replica_layout import ATTENTION, MOE
from mindio_adaptor.core.layout.state_reshard import Slot


def distributed_optimizers(optimizer) -> list:
    """The DistributedOptimizer instances inside Megatron's (possibly chained) optimizer."""
    if optimizer is None:
        return []
    inner = getattr(optimizer, "chained_optimizers", [optimizer])
    return [opt for opt in inner if hasattr(opt, "shard_fp32_from_float16_groups")]


def shard_state_tensors(optimizer) -> list:
    """This rank's optimizer shard: fp32 main params, then each one's Adam state, in a fixed order."""
    return [t for dopt in distributed_optimizers(optimizer) for t in distributed_optimizer_shard(dopt)]


def distributed_optimizer_shard(dopt) -> list:
    """One distributed optimizer's part of this rank's shard, in shard_state_tensors' order."""
    tensors = []
    for group in dopt.optimizer.param_groups:
        for param in group["params"]:
            tensors.append(param)
            state = dopt.optimizer.state.get(param, {})
            tensors += [state[k] for k in sorted(state) if isinstance(state[k], torch.Tensor)]
    return tensors


# Answers Megatron computes with a collective the first time they are asked, then caches: a
# replacement asking again would run a collective its peers never run. It takes its peer's answers.
LAZY_CACHES = ("_has_grad_norm_group_cache",)


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
        kind = MOE if optimizes_experts(opt) else ATTENTION
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
    """This rank's part of every parameter's optimizer state, as core/layout/state_reshard addresses it, by the kind of
    state ("dense", "expert": each sharded over its own data-parallel group, `state_group`): for each model
    parameter in its shard, the first of the parameter's (flattened) elements it holds and the fp32 main param
    and optimizer moments over them, keyed by the optimizer's index and the parameter's name. The step count
    (a 0-dim tensor) is not in it: it comes with the optimizer's own state dict."""
    names = {param: f"{index}.{name}" for index, chunk in enumerate(model) for name, param in chunk.named_parameters()}
    slots = {kind: {} for kind in STATE_KINDS}
    for index, dopt in enumerate(distributed_optimizers(optimizer)):
        kind = slots["expert" if optimizes_experts(dopt) else "dense"]
        for buffer_ranges in dopt.gbuf_ranges:
            for bucket_ranges in buffer_ranges.values():
                for bucket in bucket_ranges:
                    for param, ranges in bucket["param_map"].items():
                        tensors = dopt._get_main_param_and_optimizer_states(param)
                        kind[f"{index}.{names[param]}"] = Slot(ranges["param"].start, {
                            name: t for name, t in tensors.items() if t.dim() > 0})
    return slots


def optimizes_experts(opt) -> bool:
    """Megatron builds the expert optimizer over the DDP's expert buffers, whose parameters it marks
    allreduce=False (expert-parallel: reduced over the expert data-parallel ranks only)."""
    return any(not getattr(param, "allreduce", True) for buffer in opt.buffers for param in buffer.params)


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
