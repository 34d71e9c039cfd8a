"""A helper process that a rank started with multiprocessing's spawn method (Megatron's checkpoint
writer, for one) outlives the rank when the rank is SIGKILLed: nothing tells it, and it keeps running
after the job ended. A spawned child imports the training script again, so patch_all() runs in it too:
there it arms this guard, which ends the child as soon as its parent is gone (it was re-parented). A child spawned
without the script (core/process/script_free_spawn: the checkpoint writer's helper) arms it from its own main.
A rank also makes the helpers it starts otherwise end with it (install_for_children): a process it
forks from its main thread gets the kernel's parent-death signal (SIGKILL), and multiprocessing's
forkserver, which neither runs the training script nor is spawned, preloads core/process/forkserver_guard."""
import ctypes
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import threading
import time

import psutil

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
    end_with_parent(poll_s)
    return True


def end_with_parent(poll_s: float = POLL_S, and_children: bool = False) -> None:
    """A daemon thread that ends this process (first its own children, with `and_children`) once the
    parent it has now is gone (it was re-parented)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        logger.warning("pid %d: parent process %d is gone; this helper process ends with it", os.getpid(), parent)
        for child in psutil.Process().children(recursive=True) if and_children else ():
            try:
                child.kill()
            except psutil.Error:  # ended meanwhile
                pass
        logging.shutdown()
        os._exit(1)

    threading.Thread(target=watch, name="mindio-orphan-guard", daemon=True).start()


FORKSERVER_GUARD = "mindio_adaptor.core.process.forkserver_guard"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_forker = {"pid": 0, "main_thread": False}  # written in the parent right before a fork, read in the child
_children_guarded = False


def install_for_children() -> None:
    """From now on every helper this process starts by fork or through the forkserver ends with it."""
    global _children_guarded
    if _children_guarded:
        return
    _children_guarded = True
    os.register_at_fork(before=_note_forker, after_in_child=_die_with_parent)
    preload = list(getattr(multiprocessing.forkserver._forkserver, "_preload_modules", None) or ["__main__"])
    multiprocessing.set_forkserver_preload(preload + [FORKSERVER_GUARD])


def _note_forker() -> None:
    _forker["pid"] = os.getpid()
    _forker["main_thread"] = threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    # The kernel sends the signal when the forking *thread* ends: only a fork from the main thread, which
    # lasts as long as the process, can be tied to the parent's life this way.
    if _forker["main_thread"]:
        die_with(_forker["pid"])


def die_with(parent: int) -> None:
    """The kernel's parent-death signal (SIGKILL) for this process, whose parent is `parent`; it ends at once when
    that parent died before the signal was armed. No thread: for a process that forks (a thread there would hold
    locks the fork copies)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the launcher's process-group cleanup remains
        return
    if os.getppid() != parent:
        os._exit(1)
