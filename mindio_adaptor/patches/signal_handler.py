"""Megatron's SIGTERM handler (--exit-signal-handler, on with --enable-high-availability) only sets a
flag; Megatron installs it in the training process and again in every DataLoader worker. A worker that
swallows SIGTERM cannot be ended by multiprocessing when its parent exits, so a rank that crashes hangs
forever in its own exit. We keep the flag in the training process only: a DataLoader worker (a
multiprocessing child), or any other process forked after the handler was installed, dies of SIGTERM as
usual. Under torchrun the workers never get the launcher's SIGTERM themselves (it signals the ranks),
so a graceful stop still ends the current step and saves. The signal is also remembered for a rank
parked after a fault (the session's `termination`): it ends a step no more, but tells the rank its launcher wants it gone."""
import multiprocessing
import os
import signal

from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION


def _training_process_only(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if multiprocessing.parent_process() is not None:
        signal.signal(instance.sig, signal.SIG_DFL)
        return result
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        instance._signal_received = True
        SESSION.termination.set()

    signal.signal(instance.sig, handler)
    return result


PATCHES = [
    Patch("megatron.training.dist_signal_handler", "DistributedSignalHandler.__enter__",
          _training_process_only),
]
