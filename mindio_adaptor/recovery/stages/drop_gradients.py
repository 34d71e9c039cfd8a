"""CLEAN of a process replacement: only this step's gradients are dropped; the groups are rebuilt at
REBUILD_GROUP, once the replacement process is there to join them (stages/rebuild_groups)."""
import logging

from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def drop_gradients(session, megatron, action) -> int:
    megatron.drop_gradients(session.job.model)
    logger.info("clean: gradients dropped; the groups are rebuilt when the replacement has joined")
    session.timeline.mark("cleaned")
    return 0


DROP_GRADIENTS = Stage("drop gradients", drop_gradients)
