"""What a scale-in (elastic training, docs/elastic.md) changes in Megatron, on a surviving rank.

The sizes: Megatron's arguments (rank, world size, data-parallel size) and its micro-batch calculator
at the smaller data-parallel size, with the same global batch size. The state: the model, its DDP
wrapper, the optimizer and the scheduler are built again by Megatron's own setup_model_and_optimizer
(the call the job made at start, recorded by patches/training), which loads the dying-gasp checkpoint
of the repair step; Megatron's distributed checkpoint reshards it to the new data-parallel size.
pretrain() and train() hold the model list, the optimizer and the scheduler they were given, so the
new objects take the old ones' places (the list's contents; the objects' attributes) instead of
replacing them.
"""
import logging

from mindio_adaptor.core.scale_in_plan import ScaleInPlan, ScaleInRefused, plan_scale_in
from mindio_adaptor.patches import megatron_job, uneven_batches
from mindio_adaptor.patches.call_arguments import has_parameter
from mindio_adaptor.patches.recovery_session import StepSnapshot

logger = logging.getLogger(__name__)

def plan_for(layout, lost) -> ScaleInPlan:
    """The scale-in after `lost` (global ranks), refused where this slice cannot do it."""
    margs = megatron_job.args()
    refuse_unsupported(margs)
    dense = [s for s in layout.sets if s.optimizer_type == 0]
    plan = plan_scale_in([s.rank_list for s in dense], lost, margs.global_batch_size, margs.micro_batch_size,
                         layout, margs.expert_model_parallel_size)
    refuse_expert_misfit(margs.expert_model_parallel_size, plan)
    return plan


def refuse_unsupported(margs) -> None:
    """What this first slice of elastic training does not do; each refusal names the size."""
    # Tensor and pipeline parallelism are carried: a lost slice leaves with all its TP x PP ranks, the survivors
    # keep theirs. Expert parallelism is carried where the smaller job can hold it (refuse_expert_misfit).
    if margs.context_parallel_size != 1:
        raise ScaleInRefused(f"scale-in supports data, tensor, pipeline and expert parallelism alone so far; this "
                             f"job has context-parallel size {margs.context_parallel_size}")
    if getattr(margs, "step_batch_size_schedule", None) or getattr(margs, "rampup_batch_size", None):
        raise ScaleInRefused("scale-in with a batch-size ramp-up or schedule is not supported")


def from_replicas(margs) -> bool:
    """Whether the survivors take the state at the smaller size from their own memory (patches/
    resize_from_replicas), not from the dump the savers write first (`--elastic-scale-in-from`)."""
    return margs.elastic_scale_in_from == "replicas"


def refuse_expert_misfit(expert_parallel: int, plan: ScaleInPlan) -> None:
    """The experts stay where they are (each survivor keeps its expert-parallel rank), so the new data-parallel
    size must be a multiple of the expert-parallel size, and every survivor must run the same micro-batches
    (an expert's all-to-all meets every rank of its group at each micro-batch)."""
    if expert_parallel == 1:
        return
    if plan.uneven or plan.new_dp % expert_parallel:
        raise ScaleInRefused(f"scale-in to dp{plan.new_dp} with expert-parallel size {expert_parallel}: the new "
                             f"data-parallel size must be a multiple of it"
                             + (", with the step's micro-batches shared evenly" if plan.uneven else ""))


def apply_sizes(plan: ScaleInPlan, old_rank: int, init_call: tuple) -> tuple:
    """Megatron's arguments and micro-batch calculator at the plan's sizes (the world is rebuilt already);
    returns the job's initialize_model_parallel call with the plan's optimizer replica count."""
    megatron_job.set_rank(plan.new_rank(old_rank), len(plan.survivors))
    if plan.uneven:
        return resize_uneven(plan, init_call)
    return resize(plan.new_dp, plan.new_replicas, plan.num_microbatches, init_call, ScaleInRefused)


def resize_uneven(plan: ScaleInPlan, init_call: tuple) -> tuple:
    """As resize(), where the new size does not divide the step's micro-batches: this rank's share of them
    in place of Megatron's calculator (patches/uneven_batches). The data-parallel rank is the new rank's
    index in its data-parallel list, in Megatron's order (tp-dp-pp, or tp-pp-dp; no context parallelism)."""
    margs = megatron_job.args()
    tp, pp = margs.tensor_model_parallel_size, margs.pipeline_model_parallel_size
    dp_rank = margs.rank // (tp * pp) if margs.use_tp_pp_dp_mapping else (margs.rank // tp) % plan.new_dp
    megatron_job.set_parallel_sizes(plan.new_dp, plan.new_replicas)
    uneven_batches.install(plan.split, dp_rank)
    return with_replicas(init_call, plan.new_replicas)


def resize(data_parallel: int, replicas: int, num_microbatches: int, init_call: tuple, refused) -> tuple:
    """Megatron's data-parallel size, optimizer replica count (distributed-optimizer instances) and micro-batch
    calculator at a new size, the global batch size kept (a scale-in, or the scale-out back); returns the job's
    initialize_model_parallel call with the replica count. `refused`: the error raised when Megatron's
    calculator disagrees with the plan."""
    reconfigure_num_microbatches_calculator, get_num_microbatches = megatron_job.microbatch_calculator()
    margs = megatron_job.args()
    megatron_job.set_parallel_sizes(data_parallel, replicas)
    # seq_length: a parameter since megatron-core 0.13 at the latest (0.12 has none)
    extra = ({"seq_length": margs.seq_length} if has_parameter(reconfigure_num_microbatches_calculator, "seq_length")
             else {})
    reconfigure_num_microbatches_calculator(margs.rank, None, margs.global_batch_size, margs.micro_batch_size,
                                            data_parallel, **extra)
    if get_num_microbatches() != num_microbatches:
        raise refused(f"Megatron's calculator gives {get_num_microbatches()} micro-batches at dp{data_parallel}, "
                      f"the plan {num_microbatches}")
    return with_replicas(init_call, replicas)


def with_replicas(init_call: tuple, replicas: int) -> tuple:
    """The job's initialize_model_parallel call with `replicas` distributed-optimizer instances."""
    init_args, init_kwargs = init_call
    return init_args, {**init_kwargs, "num_distributed_optimizer_instances": replicas}


def resume_at_checkpoint(session, megatron, step: int, what: str, refused) -> None:
    """A resize's REPAIR (`what`: "scale in" or "scale out"): the model, optimizer and scheduler built again at
    the current sizes from the checkpoint of `step` just saved, the step's snapshot taken, and the data
    iterators started again at its sample with the current data-parallel rank and size."""
    if not session.save_root:
        raise refused(f"the run has no --save directory: there is no checkpoint to {what} from")
    iteration, flops = rebuild(session.job, session.save_root, step)
    if iteration != step:
        raise refused(f"asked to {what} from the checkpoint of step {step} under {session.save_root}; loaded "
                      f"step {iteration}")
    margs = megatron.args()
    resume_at(session, megatron, StepSnapshot(step, margs.consumed_train_samples, margs.skipped_train_samples,
                                              flops, megatron.rng_states()), what)


def resume_at(session, megatron, snapshot: StepSnapshot, what: str) -> None:
    """The end of a resize's REPAIR, once the state of `snapshot`'s step is in place: it is the session's last
    completed step, and the data iterators start again at Megatron's consumed samples, with the current
    data-parallel rank and size."""
    step = snapshot.iteration
    session.resume_at(snapshot)
    for wrapper in session.replay.iterators.values():
        wrapper.restart(megatron.iterator_at_sample(wrapper.inner, f"{what.replace(' ', '-')} at step {step}"), step)


def rebuild(job, root, step) -> tuple:
    """Model, DDP wrapper, optimizer and scheduler built again at the current sizes, loaded from the
    checkpoint of `step` under `root` (with no `root`: loaded from nothing, freshly initialised, for a state
    that comes from elsewhere); they take the places of the job's old ones. Returns (iteration, FLOPs so
    far) as loaded (0, 0 without a checkpoint)."""
    if job.setup_call is None:
        raise ScaleInRefused("the job's setup_model_and_optimizer call was not recorded: nothing to build the "
                             "model again with")
    old_model, old_optimizer, old_scheduler = job.model, job.optimizer, job.scheduler
    model, optimizer, scheduler = megatron_job.setup_model_and_optimizer_again(job.setup_call, old_model, root, step)
    old_model[:] = model
    take_place_of(old_optimizer, optimizer)
    take_place_of(old_scheduler, scheduler)
    job.model, job.optimizer, job.scheduler = old_model, old_optimizer, old_scheduler
    margs = megatron_job.args()
    return margs.iteration, margs.num_floating_point_operations_so_far


def take_place_of(old, new) -> None:
    """`old` (held by Megatron's pretrain and train frames) becomes `new`: the same class, sharing its
    attributes, so either reference acts on the new state."""
    if old is None:
        return
    if type(old) is not type(new):
        raise ScaleInRefused(f"the rebuilt {type(new).__name__} cannot take the place of the job's "
                             f"{type(old).__name__}")
    old.__dict__ = new.__dict__
