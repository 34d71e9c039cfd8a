"""How a job with high availability ends.

The final checkpoint save (pretrain's, after the train loop) is a save like the periodic ones: a fault
in it is reported and handled by the controller's decision (a dying-gasp checkpoint of the last step,
or an online repair and the save again) instead of ending the rank with a traceback.

When pretrain returns, every collective of the training is done and its final state is on disk: the
rank tells the controller it finished, so that a fault after that point (a rank lost while the
processes exit, a crash in a destructor) is logged and not acted on, and a completed run stays
completed. The rank leaves the controller when its process exits (controller_link.disconnect).
"""
import logging

from mindio_adaptor.core.job import processor_link
from mindio_adaptor.patches import exception_loop
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery import decision_wait
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


def _train_then_final_part(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    SESSION.train_returned = True  # a save from here on is the final one
    return result


def _final_save_with_fault_handling(wrapped, instance, args, kwargs):
    if not (SESSION.train_returned and exception_loop.adaptor_handles_faults()):
        return wrapped(*args, **kwargs)  # a periodic save: the train loop's fault handling covers it
    iteration = args[0] if args else kwargs["iteration"]
    while True:
        try:
            return wrapped(*args, **kwargs)
        except Exception as exc:
            decision_wait.wait_for_decision(SESSION, exc, iteration)  # returns only after an online repair
            SESSION.thread.reset()
            logger.info("final save of iteration %d: saving again after the online repair", iteration)


def _pretrain_then_finish(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if exception_loop.ha_enabled():
        SESSION.job.training_finished = True
        link = processor_link.current_or_none()
        if link is not None:
            link.finish()
    return result


PATCHES = [
    Patch("megatron.training.training", "train", _train_then_final_part),
    Patch("megatron.training.training", "save_checkpoint_and_time", _final_save_with_fault_handling),
    Patch("megatron.training.training", "pretrain", _pretrain_then_finish),
]
