"""A helper process spawned without running the training script again.

A child started by multiprocessing's spawn method first runs its parent's main module, here the training script:
torch, Megatron, patch_all() and every other import of the user's, several CPU-seconds, before it does its work.
Megatron's checkpoint writer spawns one such helper per saving rank (the Manager that serves its write results),
at the process's first save, and the rank waits for it; after a fault that first save is often the dying-gasp
checkpoint. Inside `entry_script_not_rerun()` a spawned child runs this module as its main instead, which only
arms the orphan guard (what the script's patch_all() did in it). What the helper receives is unpickled from
importable modules (torch's write results), never from the script.
"""
import contextlib
from multiprocessing import spawn

from mindio_adaptor.core.process import orphan_guard

if __name__ == "__mp_main__":  # in the spawned child
    orphan_guard.arm()


@contextlib.contextmanager
def entry_script_not_rerun():
    """Children spawned (or started through a new forkserver) meanwhile run this module as their main module."""
    original = spawn.get_preparation_data

    def without_the_script(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data["init_main_from_name"] = __name__
        return data

    spawn.get_preparation_data = without_the_script
    try:
        yield
    finally:
        spawn.get_preparation_data = original
