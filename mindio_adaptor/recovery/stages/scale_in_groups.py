"""REBUILD_GROUP of a scale-in (elastic training): the ranks that were not replaced in time are gone
for good, and with them every rank of their data-parallel slices. The survivors form a new world among
themselves (dense renumbering: a survivor's new rank is its index among them, core/layout/scale_in_plan),
Megatron's parallel state is initialised again on it (its data-parallel size now the smaller one, the
replica layout rebuilt from it and reported to the controller in the start's numbering,
recovery/resized_layout), and Megatron's arguments and micro-batch calculator take the new sizes
with the same global batch size. The model and optimizer are built at these sizes at REPAIR
(stages/scale_in_state). A live rank of a lost slice leaves the job instead (core/detection/leaving_rank).
A job already scaled in scales in again the same way, planned on the smaller job; the session keeps the two as
one plan from the start (core/layout/scale_in_plan, ScaleInPlan.then)."""
import logging
import time

from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob, leaving_line
from mindio_adaptor.recovery import resized_layout, scale_in
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_in_groups(session, megatron, action) -> int:
    started, margs = time.monotonic(), megatron.args()
    # Planned on the job as it is now: while it is scaled in already, in the smaller job's numbering.
    lost = resized_layout.current_ranks(session, action.error_ranks)
    plan = scale_in.plan_for(margs, session.job.layout, lost)
    old_rank = margs.rank
    if old_rank not in plan.survivors:
        leave(session, old_rank, plan)
    session.communicators.catch_up_with_the_job(session)  # the dump's savers met in an epoch of their own; the other survivors did not
    epoch = session.communicators.rebuild_world(session, margs, plan.survivors)
    session.job.model_parallel_init = megatron.apply_scale_in_sizes(plan, old_rank, session.job.model_parallel_init)
    megatron.reinitialize_parallel_state(session.job.model_parallel_init, replica_layout=True)
    session.scale_in = plan if session.scale_in is None else session.scale_in.then(plan)
    resized_layout.report(session)  # before the reply: the controller plans the next fault on it
    logger.info("scale-in: rank %d is rank %d of %d now; communicators rebuilt (epoch %d) for %s in %.2f s",
                old_rank, margs.rank, margs.world_size, epoch, plan.describe(), time.monotonic() - started)
    session.timeline.mark("groups rebuilt", f"epoch {epoch} scaled in to dp{plan.new_dp}")
    return 0


def leave(session, rank: int, plan) -> None:
    """A live rank of a data-parallel slice that lost a rank: it leaves the job (core/detection/leaving_rank), unless
    the job's controller runs in this process (the in-job controller, rank 0's): the job would lose it."""
    from mindio_adaptor.ttp import controller

    if controller.tft_query_high_availability_switch():
        raise scale_in.ScaleInRefused(f"rank {rank} is in a data-parallel slice that lost a rank, and the job's "
                                      f"controller runs in its process: it cannot leave the job (start the "
                                      f"controllers beside the job: mindio-adaptor launch --controllers)")
    step = session.latest.iteration if session.latest is not None else -1
    whole = plan if session.scale_in is None else session.scale_in.then(plan)  # said in the start's numbering
    raise LeavingTheJob(leaving_line(resized_layout.start_ranks(session, [rank])[0], step, whole))


SCALE_IN_GROUPS = Stage("scale in: groups", scale_in_groups)
