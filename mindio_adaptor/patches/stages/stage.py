"""What a recovery stage is, and the controller's action it runs for.

A stage is called as run(session, megatron, action): the rank's RecoverySession, the Megatron facade
(patches/megatron_job, or a test's stand-in with the same functions) and the action. It returns 0,
or raises with a message that names what went wrong (the reply to the controller carries it).
No stage is interrupted once it runs: a stage that takes too long fails the controller's action at
its time limit, and the flow's fallback (the dump, or the exit) follows.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple


@dataclass(frozen=True)
class RecoveryAction:
    name: str  # stop, clean, rebuild_group, repair, rollback, save_ckpt, rename, exit
    strategy: str = "none"  # the controller's decision, as tft_get_repair_type() names it
    step: int = -1  # the repair step (the step a dump saves)
    repair: Optional[dict] = None  # repair: {"type", "repair_type", "src", "dst", "rank_list"}
    save_info: List[dict] = field(default_factory=list)  # save_ckpt: [{"type", "ranks"}]
    error_ranks: Tuple[int, ...] = ()


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Any, Any, RecoveryAction], int]
    # On the parked training thread (device state is per thread; Megatron expects its own thread),
    # or on the processor's thread (what must happen while the training thread is still busy).
    on_training_thread: bool = True
