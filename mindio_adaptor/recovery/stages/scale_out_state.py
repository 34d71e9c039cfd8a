"""REPAIR of a scale-out (elastic training), on every rank of the original world: the model, its DDP
wrapper, the optimizer and the scheduler are built again at the original sizes by Megatron's own setup,
and take the repair step's state either from the survivors' memory (`--elastic-scale-out-from replicas`,
the default: recovery/resize_from_replicas) or from the checkpoint the survivors just saved at the
smaller size (`checkpoint`: stages/scale_out_save; Megatron's distributed checkpoint reshards the
optimizer state back). A returned process gets its state this way too, not at ROLLBACK. The data
iterators start again at the step's sample with the original data-parallel rank and size, and ROLLBACK
takes every rank to the repair step."""
import logging
import time
from datetime import datetime, timezone

from mindio_adaptor.core.layout.scale_out_plan import ScaleOutRefused
from mindio_adaptor.recovery import scale_in, scale_out
from mindio_adaptor.recovery.resize_from_replicas import resume_from_replicas
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_out_state(session, megatron, action) -> int:
    started, step, margs = time.monotonic(), action.step, megatron.args()
    returning = session.replacement.active and not session.replacement.joined
    from_replicas = scale_out.from_replicas(session.config)
    if from_replicas:
        resume_from_replicas(session, megatron, step, returning, "scale out")
    else:
        scale_in.resume_at_checkpoint(session, megatron, step, "scale out", ScaleOutRefused)
    if returning:
        _position_returned_data(session, megatron, step)
        # A returned process has its state now: ROLLBACK expects none from a replica peer.
        session.replacement.joined, session.replacement.joined_at = True, step
    plan = session.scale_out
    if margs.rank == 0 and plan is not None:
        logger.warning("elastic training: scaled out %s after step %d at %s: ranks %s, retired by the scale-in, "
                       "returned; training goes on from sample %d with the global batch size %d (state %s in "
                       "%.2f s)", plan.describe(), step,
                       datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"), list(plan.returned),
                       margs.consumed_train_samples, margs.global_batch_size,
                       "from the replicas" if from_replicas else "loaded", time.monotonic() - started)
    session.timeline.mark("scaled out", f"to {margs.world_size} ranks at step {step}")
    return 0


def _position_returned_data(session, megatron, step: int) -> None:
    """A returned process built its data loader at sample 0 and has run no train_step (no replay
    wrapper yet): its train data iterator's source starts at the checkpoint's sample."""
    megatron.position_train_iterators(session.replacement.train_data_iterator, f"returned process at step {step}")


SCALE_OUT_STATE = Stage("scale out: state", scale_out_state)
