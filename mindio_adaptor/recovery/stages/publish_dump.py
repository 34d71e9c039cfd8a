"""RENAME, on one saver once every saver is done: the staged dying-gasp checkpoint becomes the resume
point (core/checkpoint/dump_dir)."""
import logging

from mindio_adaptor.core.checkpoint import dump_dir
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def publish_dump(session, megatron, action) -> int:
    final = dump_dir.publish(session.save_root, action.step)
    logger.info("dump of step %d published: %s is the resume point", action.step, final)
    session.timeline.mark("dump published", f"step {action.step}")
    return 0


PUBLISH_DUMP = Stage("publish dump", publish_dump, on_training_thread=False)
