"""Which saver plays which rank in the savers' world of a dying-gasp checkpoint.

The savers (one healthy holder per optimizer shard) form a job with ONE optimizer instance: its
data-parallel size is the shard count, and every saver takes the data-parallel rank equal to its
shard index, its tensor, context and pipeline coordinates unchanged. Shards are placed by shard index
from the replica layout, never by the order of a rank list."""
from typing import Dict, List, Sequence


class DumpError(RuntimeError):
    pass


def dump_world(savers: Sequence[int], sizes, layout) -> List[int]:
    """members[new rank] = global rank of the saver that plays it. A new rank is laid out like
    Megatron's own ranks (order tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp) with the data-parallel
    coordinate replaced by the saver's shard index. `sizes` carries Megatron's parallel sizes
    (tensor/pipeline/context/data/expert model-parallel sizes, the optimizer instance count and
    use_tp_pp_dp_mapping); `layout` is the job's core.replica_layout.ReplicaLayout."""
    if sizes.expert_model_parallel_size > 1:
        raise DumpError("dump with expert parallelism (--expert-model-parallel-size > 1) is not supported yet")
    tp, cp, pp = sizes.tensor_model_parallel_size, sizes.context_parallel_size, sizes.pipeline_model_parallel_size
    dp = sizes.data_parallel_size
    shards = dp // sizes.num_distributed_optimizer_instances
    dp_before_pp = not getattr(sizes, "use_tp_pp_dp_mapping", False)
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
    return [slots[n] for n in range(size)]
