"""Megatron's parallel state: its process groups, initialised again on a rebuilt world, and the savers' world
of one optimizer instance."""
import torch.distributed as dist

from mindio_adaptor.megatron.optimizer import distributed_optimizers, optimizes_experts


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
        if optimizes_experts(opt):
            opt.data_parallel_group = ps.get_expert_data_parallel_group()
            if gloo:
                opt.data_parallel_group_gloo = ps.get_expert_data_parallel_group_gloo()
        else:
            opt.data_parallel_group = ps.get_data_parallel_group(with_context_parallel=True)
            if gloo:
                opt.data_parallel_group_gloo = ps.get_data_parallel_group_gloo(with_context_parallel=True)
        opt.distributed_optimizer_instance_id = 0


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


def state_group(kind: str):
    """The whole group (every optimizer instance of it) over which a kind of optimizer state is sharded."""
    from megatron.core import parallel_state as ps

    return ps.get_expert_data_parallel_group() if kind == "expert" else data_parallel_group()


def world_size() -> int:
    return dist.get_world_size()
