"""A scale-in (elastic training, docs/elastic.md) on a surviving rank: its plan, what this slice of elastic
training refuses, and the end of a resize's REPAIR.

The sizes change through the Megatron facade (megatron/sizes: rank, world size, data-parallel size, replica
count and micro-batch calculator at the smaller data-parallel size, the same global batch size). The state: the
model, its DDP wrapper, the optimizer and the scheduler are built again by Megatron's own
setup_model_and_optimizer (megatron/rebuild), from the replicas (recovery/resize_from_replicas) or loaded
from the dying-gasp checkpoint of the repair step, which Megatron's distributed checkpoint reshards to the new
data-parallel size.
"""
import logging

from mindio_adaptor.core.layout.replica_layout import ATTENTION
from mindio_adaptor.core.layout.scale_in_plan import ScaleInPlan, ScaleInRefused, plan_scale_in, refuse_expert_misfit
from mindio_adaptor.core.steps.step_snapshot import StepSnapshot

logger = logging.getLogger(__name__)


def plan_for(margs, layout, lost) -> ScaleInPlan:
    """The scale-in after `lost` (global ranks), refused where this slice cannot do it."""
    refuse_unsupported(margs)
    dense = layout.sets_of(ATTENTION)
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


def from_replicas(config) -> bool:
    """Whether the survivors take the state at the smaller size from their own memory (patches/
    resize_from_replicas), not from the dump the savers write first (`--elastic-scale-in-from`)."""
    return config.elastic_scale_in_from == "replicas"


def resume_at_checkpoint(session, megatron, step: int, what: str, refused) -> None:
    """A resize's REPAIR (`what`: "scale in" or "scale out"): the model, optimizer and scheduler built again at
    the current sizes from the checkpoint of `step` just saved, the step's snapshot taken, and the data
    iterators started again at its sample with the current data-parallel rank and size."""
    if not session.save_root:
        raise refused(f"the run has no --save directory: there is no checkpoint to {what} from")
    iteration, flops = megatron.rebuild(session.job, session.save_root, step)
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
    who = f"{what.replace(' ', '-')} at step {step}"
    for wrapper in session.replay.iterators.values():
        wrapper.restart(megatron.iterator_at_sample(wrapper.inner, who), step)
    megatron.position_valid_iterators(session.job.valid_data_iterator, who)
    megatron.position_test_iterators(session.job.test_data_iterators, who)
