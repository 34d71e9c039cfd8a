"""EXIT, on the processor's thread: a parked training thread ends the process itself (the decision
wait raises SystemExit); a hung one cannot, so the process is ended shortly after the reply to the
controller has gone out."""
import logging
import os
import threading

from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)

HUNG_EXIT_GRACE_S = 2.0


def end_even_if_hung(session, megatron, action) -> int:
    parked = session.thread.parked
    if parked.is_set():
        return 0

    def end():
        if not parked.is_set():
            logger.error("the controller ended the job and the training thread is hung: ending the process")
            logging.shutdown()
            os._exit(1)

    threading.Timer(HUNG_EXIT_GRACE_S, end).start()
    return 0


END_IF_HUNG = Stage("end even if hung", end_even_if_hung, on_training_thread=False)
