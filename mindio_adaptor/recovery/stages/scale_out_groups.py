"""REBUILD_GROUP of a scale-out (elastic training): every rank of the original world meets again, the
survivors of the scale-in and the processes that returned for the ranks it retired (their fault ranks,
action.error_ranks). A survivor takes back its original rank, world and data-parallel size and the
original micro-batch count (megatron_job/sizes); a returned process started at those sizes on the fake
backend and has real groups from here on. The world is rebuilt among all of them (core/communication/comm epochs,
the original numbering) and Megatron's parallel state initialised again on it, with the replica layout
of the start, which every rank reports to the controller again (recovery/resized_layout). The model and optimizer are built at these sizes at REPAIR (stages/scale_out_state), so
no group reference needs re-pointing."""
import logging
import time

from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery import resized_layout, scale_out
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_out_groups(session, megatron, action) -> int:
    started, margs, returned = time.monotonic(), megatron.args(), sorted(action.error_ranks)
    returning = session.replacement.active and not session.replacement.joined
    plan = None
    if returning:
        if margs.rank not in returned:
            raise ScaleOutRefused(f"returned process of rank {margs.rank} asked to join a scale-out that takes "
                                  f"back ranks {returned}")
        before = margs.rank
    else:
        plan = scale_out.plan_for(margs, session.scale_in, returned)
        before = megatron.take_original_rank(plan)
    # The survivors rebuilt their own world at CLEAN, after the returned processes read the job's last
    # epoch: every member numbers this rebuild from the job's store again.
    session.communicators.continue_epochs_of_the_job(session)
    epoch = session.communicators.rebuild_world(session, margs, range(margs.world_size))
    session.replacement.fake_world = False  # a returned process's collectives are real from here on
    if plan is not None:
        session.job.model_parallel_init = megatron.apply_original_sizes(plan, session.job.model_parallel_init)
        session.scale_in, session.scale_out = None, plan
    megatron.reinitialize_parallel_state(session.job.model_parallel_init, replica_layout=True)
    resized_layout.report(session)  # the layout of the start again, which the controller takes back
    logger.info("scale-out: rank %d is rank %d of %d now; communicators rebuilt (epoch %d) with returned ranks %s "
                "in %.2f s", before, margs.rank, margs.world_size, epoch, returned, time.monotonic() - started)
    session.timeline.mark("groups rebuilt", f"epoch {epoch} scaled out to {margs.world_size} ranks")
    return 0


SCALE_OUT_GROUPS = Stage("scale out: groups", scale_out_groups)
