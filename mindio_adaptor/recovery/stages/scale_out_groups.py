"""REBUILD_GROUP of a scale-out (elastic training): the survivors of the scale-in meet the processes that
returned for the ranks it retired (their fault ranks, action.error_ranks).

Whole (every retired rank returned): a survivor takes back its original rank, world and data-parallel size and
the original micro-batch count (megatron/sizes); a returned process started at those sizes on the fake
backend and keeps them. Partial (action.absent_ranks: retired ranks that stay out): every rank takes the sizes
of a scale-in from the start without the absent ranks' data-parallel slices (core/layout/scale_out_plan), which
the survivors plan on their plan's start lists and a returned process on its own; a returned process whose
slice has an absent rank leaves again, as a scale-in's leaver does.

The world is rebuilt among the members in the start's numbering (core/communication/comm epochs) and Megatron's
parallel state initialised again on it, with its replica layout, which every rank reports to the controller
again (recovery/resized_layout). A returned process's collectives are real from here on. The model and
optimizer are built at these sizes at REPAIR (stages/scale_out_state), so no group reference needs
re-pointing."""
import logging
import time

from mindio_adaptor.core.detection.leaving_rank import LeavingTheJob, leaving_again_line
from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery import resized_layout, scale_out
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_out_groups(session, megatron, action) -> int:
    started, margs, returned = time.monotonic(), megatron.args(), sorted(action.error_ranks)
    absent = sorted(action.absent_ranks)
    returning = session.replacement.active and not session.replacement.joined
    plan = target = None
    refused = ""
    if returning:
        if margs.rank not in returned:
            raise ScaleOutRefused(f"returned process of rank {margs.rank} asked to join a scale-out that takes "
                                  f"back ranks {returned}")
        before = margs.rank
        if absent:
            target, refused = scale_out.partial_target_of_returned(margs, session.job.layout, returned, absent)
            if margs.rank not in target.survivors:
                raise LeavingTheJob(leaving_again_line(margs.rank, absent, target, refused))
    else:
        plan = scale_out.plan_for(margs, session.scale_in, returned, absent)
        target, refused = plan.target, plan.refused
        before = megatron.take_original_rank(plan)
        if refused and margs.rank == 0:
            logger.warning("elastic training: no returned rank joins the partial scale-out (%s); the job stays at "
                           "dp%d", refused, plan.new_dp)
    # The survivors rebuilt their own world at CLEAN, after the returned processes read the job's last
    # epoch: every member numbers this rebuild from the job's store again.
    session.communicators.continue_epochs_of_the_job(session)
    members = range(margs.world_size) if target is None else target.survivors
    epoch = session.communicators.rebuild_world(session, margs, members)
    session.replacement.fake_world = False  # a returned process's collectives are real from here on
    if target is not None:  # partial: the sizes of a scale-in from the start without the absent slices
        init = session.job.model_parallel_init
        session.job.model_parallel_init = megatron.apply_scale_in_sizes(target, margs.rank, init)
        session.scale_in, session.scale_out = target, plan
    elif plan is not None:
        session.job.model_parallel_init = megatron.apply_original_sizes(plan, session.job.model_parallel_init)
        session.scale_in, session.scale_out = None, plan
    megatron.reinitialize_parallel_state(session.job.model_parallel_init, replica_layout=True)
    resized_layout.report(session)  # the layout at the new size, in the start's numbering
    logger.info("scale-out: rank %d is rank %d of %d now; communicators rebuilt (epoch %d) with returned ranks %s%s "
                "in %.2f s", before, margs.rank, margs.world_size, epoch, returned,
                f", without ranks {absent}" if absent else "", time.monotonic() - started)
    session.timeline.mark("groups rebuilt", f"epoch {epoch} scaled out to {margs.world_size} ranks")
    return 0


SCALE_OUT_GROUPS = Stage("scale out: groups", scale_out_groups)
