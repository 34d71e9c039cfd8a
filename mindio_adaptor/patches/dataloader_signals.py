"""PyTorch's DataLoader installs a SIGCHLD handler in the training process that raises "DataLoader
worker ... is killed" from whatever Python line runs when a worker dies. Under torchrun a dead rank
makes the launcher SIGTERM every worker's process group, DataLoader workers included, so those
exceptions land inside the fault handling itself (a log call, a lock being released) and one rank
never parked for the dump (seen in CI). With high availability the handler is not installed: the
DataLoader still finds a dead worker on its own, synchronously, when it next waits for a batch (its
status check runs every few seconds of waiting), and that error takes the usual fault path."""
from mindio_adaptor.patches.patch import Patch


def _no_asynchronous_worker_errors(wrapped, instance, args, kwargs):
    from mindio_adaptor.patches.exception_loop import ha_enabled

    if ha_enabled():
        return None
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch("torch.utils.data._utils.signal_handling", "_set_SIGCHLD_handler", _no_asynchronous_worker_errors),
]
