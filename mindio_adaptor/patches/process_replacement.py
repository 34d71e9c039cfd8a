"""Process replacement (--enable-worker-reboot, the reference's ARF) on Megatron: the replacement's side.

A launcher that restarts only a dead worker (`mindio-adaptor launch`) starts it again with the same rank
and MINDIO_RESTARTED=1. The others are parked, stopped by the controller; they take part in no
collective until the communicators are rebuilt with the newcomer. So the replacement:
  1. initialises Megatron on torch's "fake" backend: every collective of Megatron's start-up (barriers,
     broadcasts, group creation) returns at once without peers, and the few results the adaptor needs
     from others (controller address, replica layout inputs, last communicator epoch) come from the
     job's store (core/job_store); no checkpoint is loaded;
  2. at the start of Megatron's train loop reports ready ("ARF FINISH") and parks, like a rank after a
     fault; the controller then runs on every rank: REBUILD_GROUP (patches/online_repair.rebuild_groups:
     real groups replace the fake ones, every reference re-pointed), REPAIR (its optimizer shard and the
     repair step's state: iteration, data position, FLOPs, scheduler, RNG, from a replica peer), ROLLBACK;
  3. on RETRY enters Megatron's train loop at the repair step (patches/train_reentry), while the others
     recompute the step they were interrupted in.
"""
import inspect
import logging
import os
import time
from typing import Any, Optional

from mindio_adaptor.patches.registry import Patch

logger = logging.getLogger(__name__)

ENV_RESTARTED = "MINDIO_RESTARTED"


class Replacement:
    """This process's progress as a replacement."""

    def __init__(self):
        self.fake_world = False  # Megatron's start-up runs on the fake backend
        self.joined = False
        self.joined_at: Optional[int] = None  # the repair step it joined at
        self.train_data_iterator: Any = None


REPLACEMENT = Replacement()


def is_replacement() -> bool:
    """A process the launcher started again for a dead rank, with worker reboot on."""
    from megatron.training import global_vars

    margs = global_vars._GLOBAL_ARGS
    return os.environ.get(ENV_RESTARTED) == "1" and bool(getattr(margs, "enable_worker_reboot", False))


# --- 1. start-up on the fake backend -------------------------------------------------------------------

def _init_on_the_fake_backend(wrapped, instance, args, kwargs):
    if REPLACEMENT.joined or REPLACEMENT.fake_world or not is_replacement():
        return wrapped(*args, **kwargs)
    # torch's own fake process group (registered by importing this module): collectives are no-ops.
    from torch.testing._internal.distributed.fake_pg import FakeStore

    bound = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    REPLACEMENT.fake_world = True
    logger.info("replacement process of rank %s: Megatron starts on the fake backend; it joins the "
                "running job's communicators when the controller rebuilds them", bound.get("rank"))
    return wrapped(backend="fake", store=FakeStore(), rank=bound["rank"], world_size=bound["world_size"],
                   timeout=bound.get("timeout"))


def _groups_of_the_fake_backend(wrapped, instance, args, kwargs):
    """Megatron asks for some groups on gloo explicitly; while the world is fake, every group is."""
    if not REPLACEMENT.fake_world:
        return wrapped(*args, **kwargs)
    bound = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    bound.pop("backend", None)
    bound.pop("pg_options", None)
    return wrapped(**bound)


def _no_checkpoint_for_a_replacement(wrapped, instance, args, kwargs):
    if not is_replacement():
        return wrapped(*args, **kwargs)
    logger.info("replacement process: no checkpoint loaded; the state comes from a replica peer")
    return 0, 0


# --- 2. joining the running job ------------------------------------------------------------------------

def join(train_data_iterator) -> None:
    """At the start of Megatron's train loop in a replacement: report ready, serve the controller's
    rebuild, repair and rollback on this thread, return on RETRY (else the process ends)."""
    from mindio_adaptor.patches import comm_rebuild, exception_loop, train_reentry

    started = time.monotonic()
    REPLACEMENT.train_data_iterator = train_data_iterator
    comm_rebuild.continue_epochs_of_the_job()
    exception_loop.wait_for_decision(RuntimeError("ARF FINISH"), 0, replacement=True)
    exception_loop.TRAINING.reset()
    REPLACEMENT.joined = True
    train_reentry.enter_as_a_resumed_loop()
    logger.info("replacement process joined the job at step %d after %.2f s of waiting and repair",
                REPLACEMENT.joined_at, time.monotonic() - started)


def fake_world_ended() -> None:
    REPLACEMENT.fake_world = False


# --- 3. the repair step's state, received from the replica peer -------------------------------------

def awaiting_state() -> bool:
    """A replacement that has not yet received its state from a replica peer."""
    return is_replacement() and not REPLACEMENT.joined


def materialize_optimizer_state(optimizer) -> None:
    """A fresh optimizer has no moments yet (Adam creates them at its first step): create them, and
    the step count, so that the shard has the replica peer's layout before it is received."""
    import torch

    from mindio_adaptor.patches.training_state import distributed_optimizers

    for dopt in distributed_optimizers(optimizer):
        if dopt.init_state_fn is not None:
            dopt.init_state_fn(dopt.optimizer, dopt.config)
        for group in dopt.optimizer.param_groups:
            for param in group["params"]:
                state = dopt.optimizer.state[param]
                if state and "step" not in state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)


def install_received_state(step: int) -> None:
    """Rollback in a replacement: the peer's state of `step` (patches/repair_state), and a data
    iterator positioned at its sample."""
    from megatron.training.global_vars import get_args

    from mindio_adaptor.patches import repair_state

    repair_state.install_received(step)
    REPLACEMENT.joined_at = step
    _position_data_iterator(get_args())


def _position_data_iterator(margs) -> None:
    """The replacement built its data loader at sample 0; the job is at the repair step's sample."""
    from mindio_adaptor.patches.data_position import iterator_at_sample

    holder = REPLACEMENT.train_data_iterator
    if holder is None:
        return
    if not hasattr(holder, "iterable"):
        raise RuntimeError(f"replacement process: cannot position a '{margs.dataloader_type}' data loader at "
                           f"sample {margs.consumed_train_samples}")
    holder.iterable = iterator_at_sample(holder.iterable, margs, "replacement process")


PATCHES = [
    Patch("torch.distributed", "init_process_group", _init_on_the_fake_backend),
    Patch("torch.distributed", "new_group", _groups_of_the_fake_backend),
    Patch("megatron.training.checkpointing", "load_checkpoint", _no_checkpoint_for_a_replacement),
]
