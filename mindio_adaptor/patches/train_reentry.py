"""The wrappers of a train loop entered again at the repair step (recovery/train_reentry): the loop's start
barriers skipped until the first step, and its first step logged as the uninterrupted run logs it."""
from mindio_adaptor.patches.patch import Patch
from mindio_adaptor.recovery.session import SESSION


def _barrier_unless_reentering(wrapped, instance, args, kwargs):
    if SESSION.reentry.skip_barriers:
        return None
    return wrapped(*args, **kwargs)


def _log_as_uninterrupted(wrapped, instance, args, kwargs):
    reentry = SESSION.reentry
    if reentry.first_log_pending and kwargs.get("is_first_iteration"):
        kwargs["is_first_iteration"] = False
    reentry.first_log_pending = False
    return wrapped(*args, **kwargs)


PATCHES = [
    Patch("torch.distributed", "barrier", _barrier_unless_reentering),
    Patch("megatron.training.training", "training_log", _log_as_uninterrupted),
]
