"""What a recovery stage is, and the controller's action it runs for.

A stage is called as run(session, megatron, action): the rank's RecoverySession, the Megatron facade
(mindio_adaptor/megatron, or a test's stand-in with the same functions) and the action. It returns 0,
or raises with a message that names what went wrong (the reply to the controller carries it).
No stage is interrupted once it runs: a stage that takes too long fails the controller's action at
its time limit, and the flow's fallback (the dump, or the exit) follows.
"""
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from mindio_adaptor.core.job.processor_link import RepairAssignment, SaveAssignment


@dataclass(frozen=True)
class RecoveryAction:
    """One controller action as this rank's stages see it (recovery/flows makes it from the link's
    ControllerAction): a REPAIR is one of these per repair type this rank takes part in."""
    name: str  # stop, clean, rebuild_group, repair, rollback, save_ckpt, rename, exit
    strategy: str = "none"  # the controller's decision in force: retry, recover, dump, exit, none
    step: int = -1  # the repair step (the step a dump saves)
    repair: Optional[RepairAssignment] = None  # repair: the pairs this rank sends or receives
    saves: Tuple[SaveAssignment, ...] = ()  # save_ckpt: the savers of each optimizer type
    error_ranks: Tuple[int, ...] = ()
    absent_ranks: Tuple[int, ...] = ()  # rebuild_group of a partial scale-out: retired ranks that stay out


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Any, Any, RecoveryAction], int]
    # On the parked training thread (device state is per thread; Megatron expects its own thread),
    # or on the processor's thread (what must happen while the training thread is still busy).
    on_training_thread: bool = True
