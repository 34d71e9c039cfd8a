"""STOP, on the processor's thread: break the training thread out of its collective (core/communication/comm_abort),
so a rank whose peer died or hangs does not wait for the group timeout, then wait until the training
thread is parked. Only then may a later stage touch the model and optimizer. A training thread that
does not park in time (hung in compute) makes this rank fail the action, so the controller never
picks it to save."""
import logging
import time

from mindio_adaptor.core.communication import comm_abort
from mindio_adaptor.core.job.recovery_limits import STOP_TIMEOUT_ENV, stop_timeout_s
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def stop_training(session, megatron, action) -> int:
    thread = session.thread
    thread.stop_requested.set()
    what = comm_abort.break_collectives(thread.backend, thread.keep_ports)
    started = time.monotonic()
    limit = stop_timeout_s()
    if not thread.parked.wait(limit):
        raise RuntimeError(f"the training thread did not stop within {limit:.0f} s ({STOP_TIMEOUT_ENV}); "
                           f"it is hung, this rank cannot save")
    logger.info("stopped: %s; training thread parked after %.2f s", what, time.monotonic() - started)
    session.timeline.mark("stopped")
    return 0


STOP = Stage("stop", stop_training, on_training_thread=False)
