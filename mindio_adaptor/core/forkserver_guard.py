"""Imported by multiprocessing's forkserver as a preload module (orphan_guard.install_for_children), and
by nothing else. The forkserver is started by a rank but neither runs the training script nor is a
spawned child, so the rank's guards do not reach it: this watch ends the forkserver, and every process
it forked (Megatron's persistent checkpoint worker, for one), once the rank that started it is gone."""
import os
import threading
import time

import psutil

POLL_S = 1.0


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass
    os._exit(1)


threading.Thread(target=_watch, args=(os.getppid(),), name="mindio-forkserver-guard", daemon=True).start()
