"""SAVE_CKPT and RENAME of a scale-in (elastic training), on the savers the controller picked. With
`--elastic-scale-in-from checkpoint` they are the dump's (stages/save_dump, stages/publish_dump): the repair
step's dying-gasp checkpoint, which the survivors then load at the smaller size and which stays the resume
point. From the replicas (the default) nothing is written: the survivors hold every shard of the state and
reshard it among themselves at REPAIR (stages/scale_in_state)."""
import logging

from mindio_adaptor.recovery import scale_in
from mindio_adaptor.recovery.stages.publish_dump import publish_dump
from mindio_adaptor.recovery.stages.save_dump import save_dump
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def scale_in_save(session, megatron, action) -> int:
    margs = megatron.args()
    first_saver = margs.rank == min((r for save in action.saves for r in save.ranks), default=margs.rank)
    if scale_in.from_replicas(session.config):
        if first_saver:
            logger.info("scale-in: no dump of step %d written: the survivors reshard the state among themselves in "
                        "memory", action.step)
        return 0
    return save_dump(session, megatron, action)


def scale_in_publish(session, megatron, action) -> int:
    if scale_in.from_replicas(session.config):
        return 0
    return publish_dump(session, megatron, action)


SCALE_IN_SAVE = Stage("scale in: save", scale_in_save)
SCALE_IN_PUBLISH = Stage("scale in: publish", scale_in_publish, on_training_thread=False)
