"""Megatron's sizes at a resize (elastic training, docs/elastic.md): this process's rank and world, the
data-parallel size, the optimizer replica count (distributed-optimizer instances) and the global micro-batch
calculator, the global batch size kept. Each function returns the job's initialize_model_parallel call with
the new replica count, for the parallel state to be initialised again with it.

`margs` and `calculator` (reconfigure, get_num_microbatches) are Megatron's own unless given: a unit test gives
stand-ins that count as Megatron does."""
from mindio_adaptor.core.layout.scale_in_plan import ScaleInPlan, ScaleInRefused
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutPlan, ScaleOutRefused
from mindio_adaptor.megatron import uneven
from mindio_adaptor.megatron.args import args, set_parallel_sizes, set_rank
from mindio_adaptor.megatron.call_arguments import has_parameter


def microbatch_calculator():
    """Megatron's global micro-batch calculator: (reconfigure, get_num_microbatches)."""
    from megatron.core.num_microbatches_calculator import get_num_microbatches, reconfigure_num_microbatches_calculator

    return reconfigure_num_microbatches_calculator, get_num_microbatches


def apply_scale_in_sizes(plan: ScaleInPlan, old_rank: int, init_call: tuple, margs=None, calculator=None) -> tuple:
    """A survivor of a scale-in at the plan's sizes (the world is rebuilt already), numbered as the plan
    numbers it."""
    margs = margs if margs is not None else args()
    set_rank(plan.new_rank(old_rank), len(plan.survivors), margs=margs)
    if plan.uneven:
        return _resize_uneven(plan, init_call, margs)
    return _resize(plan.new_dp, plan.new_replicas, plan.num_microbatches, init_call, ScaleInRefused, margs,
                   calculator)


def take_original_rank(plan: ScaleOutPlan, margs=None) -> int:
    """A survivor of the scale-in at its original rank and world, before the world is rebuilt on them; returns
    the rank it had in the scaled-in job."""
    margs = margs if margs is not None else args()
    current = margs.rank
    set_rank(plan.original_rank(current), plan.world_size, margs=margs)
    return current


def apply_original_sizes(plan: ScaleOutPlan, init_call: tuple, margs=None, calculator=None) -> tuple:
    """The scale-out back: the original data-parallel size, replica count and micro-batch count."""
    return _resize(plan.new_dp, plan.replicas, plan.num_microbatches, init_call, ScaleOutRefused,
                   margs if margs is not None else args(),
                   calculator)


def _resize_uneven(plan: ScaleInPlan, init_call: tuple, margs) -> tuple:
    """Where the new size does not divide the step's micro-batches: this rank's share of them in place of
    Megatron's calculator (megatron/uneven). The data-parallel rank is the new rank's index in its
    data-parallel list, in Megatron's order (tp-dp-pp, or tp-pp-dp; no context parallelism)."""
    tp, pp = margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size
    dp_rank = margs.rank // (tp * pp) if margs.use_tp_pp_dp_mapping else (margs.rank // tp) % plan.new_dp
    set_parallel_sizes(plan.new_dp, plan.new_replicas, margs=margs)
    uneven.install(plan.split, dp_rank)
    return _with_replicas(init_call, plan.new_replicas)


def _resize(data_parallel: int, replicas: int, num_microbatches: int, init_call: tuple, refused, margs,
            calculator) -> tuple:
    """`refused`: the error raised when Megatron's calculator disagrees with the plan."""
    reconfigure_num_microbatches_calculator, get_num_microbatches = calculator or microbatch_calculator()
    set_parallel_sizes(data_parallel, replicas, margs=margs)
    # seq_length: a parameter since megatron-core 0.13 at the latest (0.12 has none)
    extra = ({"seq_length": margs.seq_length} if has_parameter(reconfigure_num_microbatches_calculator, "seq_length")
             else {})
    reconfigure_num_microbatches_calculator(margs.rank, None, margs.global_batch_size, margs.micro_batch_size,
                                            data_parallel, **extra)
    if get_num_microbatches() != num_microbatches:
        raise refused(f"Megatron's calculator gives {get_num_microbatches()} micro-batches at dp{data_parallel}, "
                      f"the plan {num_microbatches}")
    return _with_replicas(init_call, replicas)


def _with_replicas(init_call: tuple, replicas: int) -> tuple:
    """The job's initialize_model_parallel call with `replicas` distributed-optimizer instances (the recorded
    call itself is not changed)."""
    init_args, init_kwargs = init_call
    return init_args, {**init_kwargs, "num_distributed_optimizer_instances": replicas}
