"""A helper process that a rank started with multiprocessing's spawn method (Megatron's checkpoint
writer, for one) outlives the rank when the rank is SIGKILLed: nothing tells it, and it keeps running
after the job ended. A spawned child imports the training script again, so patch_all() runs in it too:
there it arms this guard, which ends the child as soon as its parent is gone (it was re-parented).
Forked children (DataLoader workers) have their own watch in torch and are not touched."""
import logging
import multiprocessing
import os
import threading
import time

logger = logging.getLogger(__name__)
POLL_S = 1.0


def is_spawned_child() -> bool:
    """This process is a multiprocessing child started by spawn (or forkserver) that is importing the
    parent's main script (multiprocessing restores the parent's sys.argv first, so only the process
    object tells)."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def arm(poll_s: float = POLL_S) -> bool:
    """In a spawned child: a daemon thread that ends the process once its parent died. Returns
    whether it was armed."""
    if not is_spawned_child():
        return False
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        logger.warning("pid %d: parent process %d is gone; this helper process ends with it", os.getpid(), parent)
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=watch, name="mindio-orphan-guard", daemon=True).start()
    return True
