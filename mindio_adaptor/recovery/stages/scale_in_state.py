"""REPAIR of a scale-in (elastic training): the survivors, already at the smaller data-parallel size
(stages/scale_in_groups), build the model, its DDP wrapper, the optimizer and the scheduler again with
Megatron's own setup, and take the repair step's state into them: from the replicas (the default,
recovery/resize_from_replicas: the survivors hold every shard between them and reshard it in memory), or with
`--elastic-scale-in-from checkpoint` from the dying-gasp checkpoint the savers just wrote (recovery/scale_in:
Megatron's distributed checkpoint reshards the optimizer state to the new size).
The data iterators start again at the checkpoint's sample with the new data-parallel rank and size
(Megatron's sampler), so every sample of the global batch is seen once, as in the full job. ROLLBACK
then takes every survivor to the repair step and the training threads enter Megatron's train loop
again there (patches/train_reentry). No process restarts."""
import logging
import time
from datetime import datetime, timezone

from mindio_adaptor.recovery import scale_in
from mindio_adaptor.recovery.resize_from_replicas import resume_from_replicas
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_in_state(session, megatron, action) -> int:
    started, step, plan = time.monotonic(), action.step, session.scale_in
    if plan is None:
        raise scale_in.ScaleInRefused(f"asked to load step {step} at the smaller size before the groups were "
                                      f"rebuilt for it")
    from_replicas = scale_in.from_replicas(session.config)
    if from_replicas:
        resume_from_replicas(session, megatron, step, returning=False, what="scale in")
    else:
        scale_in.resume_at_checkpoint(session, megatron, step, "scale in", scale_in.ScaleInRefused)
    megatron.weigh_loss(megatron.args(), session.job.optimizer)
    margs = megatron.args()
    if margs.rank == 0:
        logger.warning("elastic training: scaled in %s after step %d at %s: ranks %s were lost and not replaced; "
                       "training goes on from sample %d with the global batch size %d (state %s in %.2f s)",
                       plan.describe(), step, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                       list(plan.lost), margs.consumed_train_samples, margs.global_batch_size,
                       "from the replicas" if from_replicas else "loaded", time.monotonic() - started)
    session.timeline.mark("scaled in", f"dp{plan.old_dp} to dp{plan.new_dp} at step {step}")
    return 0


SCALE_IN_STATE = Stage("scale in: state", scale_in_state)
