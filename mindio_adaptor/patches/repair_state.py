"""The repair step's non-sharded state: what a repair source sends beside the optimizer shard, and
what a receiving rank that is not at the repair step takes as its own.

Who is not at the repair step: a replacement process (it has no state at all), and a rank whose update
of the repair step was interrupted while the other replica instance completed it (a fault in the
optimizer phase: the repair goes forward, to that step). Such a rank takes the peer's iteration, data
position, FLOP count, scheduler, RNG states and lazily computed caches; its optimizer shard comes in
the same repair, its model params are re-derived at rollback. The state is the same on every holder
of a shard (data-parallel peers share the scheduler and, without --data-parallel-random-init, the RNG).
"""
import logging
from typing import Optional

from mindio_adaptor.patches import step_snapshot

logger = logging.getLogger(__name__)

RECEIVED: Optional[dict] = None  # the repair step's state, from the replica peer, until installed

# Answers Megatron computes with a collective the first time they are asked, then caches: a
# replacement asking again would run a collective its peers never run. It takes its peer's answers.
LAZY_CACHES = ("_has_grad_norm_group_cache",)


def is_behind(step: int) -> bool:
    """This rank has no snapshot of `step` (the repair step) of its own."""
    return step_snapshot.LATEST is None or step_snapshot.LATEST.iteration != step


def state_to_send(step: int) -> dict:
    from mindio_adaptor.patches.training_state import STATE

    return {"snapshot": step_snapshot.require(step, "send the state of"),
            "scheduler": STATE.scheduler.state_dict() if STATE.scheduler is not None else None,
            "lazy_caches": [{name: getattr(opt, name) for name in LAZY_CACHES if hasattr(opt, name)}
                            for opt in optimizers(STATE.optimizer)]}


def keep_received(state: dict) -> None:
    global RECEIVED
    RECEIVED = state


def optimizers(optimizer) -> list:
    """The optimizer and, for a chain, each optimizer in it, in a fixed order."""
    return [] if optimizer is None else [optimizer, *getattr(optimizer, "chained_optimizers", [])]


def install_received(step: int) -> step_snapshot.StepSnapshot:
    """Rollback on a rank behind the repair step: take the peer's state of `step` as this rank's own."""
    global RECEIVED
    from mindio_adaptor.patches.training_state import STATE

    if RECEIVED is None:
        raise RuntimeError(f"asked to roll back to step {step}, which this rank never completed, without "
                           f"having received that step's state from a replica peer")
    received, RECEIVED = RECEIVED, None
    snapshot = received["snapshot"]
    if snapshot.iteration != step:
        raise RuntimeError(f"received the state of step {snapshot.iteration}, asked to roll back to step {step}")
    step_snapshot.set_args(snapshot)
    if STATE.scheduler is not None and received["scheduler"] is not None:
        STATE.scheduler.load_state_dict(received["scheduler"])
    for opt, caches in zip(optimizers(STATE.optimizer), received["lazy_caches"]):
        for name, value in caches.items():
            setattr(opt, name, dict(value))
    step_snapshot.LATEST = snapshot
    STATE.completed_steps.append(step)
    logger.info("took step %d's state (iteration, data position at sample %d, scheduler, RNG) from the "
                "replica peer", step, snapshot.consumed_train_samples)
    return snapshot
