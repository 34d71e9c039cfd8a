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
  3. on RETRY enters Megatron's train loop at the repair step, while the others recompute the step they
     were interrupted in. Megatron's loop start has world barriers the others, already inside the loop,
     never reach: they are skipped until this process's first train_step.
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
        self.received: Optional[dict] = None  # the repair step's state, from the replica peer
        self.train_data_iterator: Any = None
        self.skip_barriers = False


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


def _barrier_unless_joining(wrapped, instance, args, kwargs):
    if REPLACEMENT.skip_barriers:
        return None
    return wrapped(*args, **kwargs)


# --- 2. joining the running job ------------------------------------------------------------------------

def join(train_data_iterator) -> None:
    """At the start of Megatron's train loop in a replacement: report ready, serve the controller's
    rebuild, repair and rollback on this thread, return on RETRY (else the process ends)."""
    from mindio_adaptor.patches import comm_rebuild, exception_loop

    started = time.monotonic()
    REPLACEMENT.train_data_iterator = train_data_iterator
    comm_rebuild.continue_epochs_of_the_job()
    exception_loop.wait_for_decision(RuntimeError("ARF FINISH"), 0, replacement=True)
    exception_loop.TRAINING.reset()
    REPLACEMENT.joined, REPLACEMENT.skip_barriers = True, True
    logger.info("replacement process joined the job at step %d after %.2f s of waiting and repair",
                REPLACEMENT.received["snapshot"].iteration, time.monotonic() - started)


def first_step_started() -> None:
    REPLACEMENT.skip_barriers = False


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


def state_to_send(step: int) -> dict:
    """What a replacement needs besides the optimizer shard (sent by every repair source; small)."""
    from mindio_adaptor.patches import step_snapshot
    from mindio_adaptor.patches.training_state import STATE

    return {"snapshot": step_snapshot.require(step, "send the state of"),
            "scheduler": STATE.scheduler.state_dict() if STATE.scheduler is not None else None,
            "lazy_caches": [{name: getattr(opt, name) for name in LAZY_CACHES if hasattr(opt, name)}
                            for opt in _optimizers(STATE.optimizer)]}


# Answers Megatron computes with a collective the first time they are asked, then caches: a
# replacement asking again would run a collective its peers never run. It takes its peer's answers.
LAZY_CACHES = ("_has_grad_norm_group_cache",)


def _optimizers(optimizer) -> list:
    """The optimizer and, for a chain, each optimizer in it, in a fixed order."""
    return [] if optimizer is None else [optimizer, *getattr(optimizer, "chained_optimizers", [])]


def install_received_state(step: int) -> None:
    """Rollback in a replacement: take the peer's state of `step` as this rank's own."""
    from megatron.training.global_vars import get_args

    from mindio_adaptor.patches import step_snapshot
    from mindio_adaptor.patches.training_state import STATE

    if REPLACEMENT.received is None:
        raise RuntimeError(f"replacement process: asked to roll back to step {step} before receiving "
                           f"its state from a replica peer")
    snapshot = REPLACEMENT.received["snapshot"]
    if snapshot.iteration != step:
        raise RuntimeError(f"replacement process: received the state of step {snapshot.iteration}, "
                           f"asked to roll back to step {step}")
    margs = get_args()
    margs.iteration = step
    margs.consumed_train_samples = snapshot.consumed_train_samples
    margs.skipped_train_samples = snapshot.skipped_train_samples
    margs.num_floating_point_operations_so_far = snapshot.floating_point_operations
    if STATE.scheduler is not None and REPLACEMENT.received["scheduler"] is not None:
        STATE.scheduler.load_state_dict(REPLACEMENT.received["scheduler"])
    for opt, caches in zip(_optimizers(STATE.optimizer), REPLACEMENT.received["lazy_caches"]):
        for name, value in caches.items():
            setattr(opt, name, dict(value))
    step_snapshot.LATEST = snapshot
    STATE.completed_steps.append(step)
    _position_data_iterator(margs)


def _position_data_iterator(margs) -> None:
    """The replacement built its data loader at sample 0; the job is at the repair step's sample."""
    from megatron.training.datasets.data_samplers import build_pretraining_data_loader
    from megatron.training.training import cyclic_iter

    holder = REPLACEMENT.train_data_iterator
    if holder is None:
        return
    if margs.dataloader_type not in ("single", "cyclic") or not hasattr(holder, "iterable"):
        raise RuntimeError(f"replacement process: cannot position a '{margs.dataloader_type}' data "
                           f"loader at sample {margs.consumed_train_samples}")
    old = holder.iterable
    dataset = getattr(old, "_dataset", None)
    if dataset is None:
        raise RuntimeError("replacement process: the train data iterator does not expose its dataset")
    loader = build_pretraining_data_loader(dataset, margs.consumed_train_samples)
    holder.iterable = iter(loader) if margs.dataloader_type == "single" else iter(cyclic_iter(loader))
    if hasattr(old, "_shutdown_workers"):
        old._shutdown_workers()
    logger.info("replacement process: data iterator positioned at sample %d", margs.consumed_train_samples)


PATCHES = [
    Patch("torch.distributed", "init_process_group", _init_on_the_fake_backend),
    Patch("torch.distributed", "new_group", _groups_of_the_fake_backend),
    Patch("torch.distributed", "barrier", _barrier_unless_joining),
    Patch("megatron.training.checkpointing", "load_checkpoint", _no_checkpoint_for_a_replacement),
]
