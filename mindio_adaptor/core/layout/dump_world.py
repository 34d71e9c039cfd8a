"""Which saver plays which rank in the savers' world of a dying-gasp checkpoint.

The savers (one healthy holder per optimizer shard) form a job with ONE optimizer instance: its
data-parallel size is the shard count, and every saver takes the data-parallel rank equal to its
shard index, its tensor, context and pipeline coordinates unchanged. Shards are placed by shard index
from the replica layout, never by the order of a rank list."""
from typing import Dict, List, Sequence


class DumpError(RuntimeError):
    pass


def dump_world(savers: Sequence[int], sizes, layout) -> List[int]:
    """members[new rank] = global rank of the saver that plays it (the savers of the dense shards; with
    expert parallelism each also holds the expert shard of its place, checked). A new rank is laid out like
    Megatron's own ranks (order tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp) with the data-parallel
    coordinate replaced by the saver's shard index. `sizes` carries Megatron's parallel sizes
    (tensor/pipeline/context/data/expert model-parallel sizes, the optimizer instance count and
    use_tp_pp_dp_mapping); `layout` is the job's core.layout.replica_layout.ReplicaLayout."""
    tp, cp, pp = sizes.tensor_model_parallel_size, sizes.context_parallel_size, sizes.pipeline_model_parallel_size
    dp = sizes.data_parallel_size
    shards = dp // sizes.num_distributed_optimizer_instances
    dp_before_pp = not getattr(sizes, "use_tp_pp_dp_mapping", False)
    if sizes.expert_model_parallel_size > 1:
        _check_expert_sizes(sizes, shards)
    slots: Dict[int, int] = {}
    for rank in savers:
        t, c = rank % tp, (rank // tp) % cp
        p = rank // (tp * cp * dp) if dp_before_pp else (rank // (tp * cp)) % pp
        shard = layout.set_of(rank).shard_of(rank)
        new = t + tp * (c + cp * ((shard + shards * p) if dp_before_pp else (p + pp * shard)))
        if new in slots:
            raise DumpError(f"savers {slots[new]} and {rank} both hold shard {shard} at tp {t} cp {c} pp {p}")
        slots[new] = rank
    size = shards * tp * cp * pp
    missing = [n for n in range(size) if n not in slots]
    if missing:
        raise DumpError(f"savers {list(savers)} leave {len(missing)} of {size} (tp, cp, pp, shard) positions "
                        f"without a saver")
    members = [slots[n] for n in range(size)]
    if sizes.expert_model_parallel_size > 1:
        _check_expert_places(members, sizes, layout)
    return members


def _check_expert_sizes(sizes, shards: int) -> None:
    """The savers' world of an MoE job is laid out by its dense shards: each saver's expert coordinates
    there must be those it holds, which Megatron's expert order (tp-ep-dp-pp) gives when the expert
    parallel size divides the shard count and the expert tensor-parallel size is the dense one."""
    ep, tp = sizes.expert_model_parallel_size, sizes.tensor_model_parallel_size
    etp = getattr(sizes, "expert_tensor_parallel_size", None) or tp
    refusals = []
    if shards % ep:
        refusals.append(f"the expert-parallel size {ep} does not divide the {shards} dense shards of an optimizer "
                        f"instance")
    if etp != tp:
        refusals.append(f"the expert tensor-parallel size {etp} differs from the tensor-parallel size {tp}")
    if sizes.context_parallel_size > 1:
        refusals.append(f"context parallelism ({sizes.context_parallel_size}) with expert parallelism")
    if refusals:
        raise DumpError("dump of this MoE job is not supported: " + "; ".join(refusals))


def _check_expert_places(members: Sequence[int], sizes, layout) -> None:
    """Each saver holds, in the expert optimizer, the shard its place in the savers' world takes: its
    expert-parallel rank, and its shard index among the expert data-parallel ranks of one instance."""
    from mindio_adaptor.core.layout.replica_layout import MOE

    tp, pp, ep = sizes.tensor_model_parallel_size, sizes.pipeline_model_parallel_size, sizes.expert_model_parallel_size
    dp, dp_before_pp = sizes.data_parallel_size, not getattr(sizes, "use_tp_pp_dp_mapping", False)
    shards = len(members) // (tp * pp)
    for new, rank in enumerate(members):
        place = (new // tp) % shards if dp_before_pp else new // (tp * pp)
        held = (rank // tp) % dp if dp_before_pp else rank // (tp * pp)
        expert_set = layout.set_of(rank, MOE)
        if held % ep != place % ep or expert_set.shard_of(rank) != place // ep:
            raise DumpError(f"saver {rank} holds expert-parallel rank {held % ep}, expert shard "
                            f"{expert_set.shard_of(rank)}, but its place {new} in the savers' world takes "
                            f"expert-parallel rank {place % ep}, expert shard {place // ep}")
