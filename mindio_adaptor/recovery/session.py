"""The recovery session: everything this process keeps between a fault and the step training goes on
at, in one object.

One session per training process (`SESSION`), made with this module so that the patches running
before the rank connects to the controller (the record of model and optimizer, a replacement's start
on the fake backend) have it; `controller_link.connect` completes it (save root, backend, ports to
keep). The recovery stages (recovery/stages) take it as an argument and read nothing else (the communicators'
rebuilds too are reached through it), so a test builds its own; only the wrappers Megatron calls reach for
`SESSION`.
"""
import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Optional, Set

from mindio_adaptor.core.job.ha_config import HighAvailabilityConfig
from mindio_adaptor.core.process.training_thread import TrainingThread
from mindio_adaptor.core.steps.loss_line import LossLineBook
from mindio_adaptor.core.steps.recovery_timeline import Timeline
from mindio_adaptor.core.steps.step_snapshot import StepSnapshot
from mindio_adaptor.recovery import comm_rebuild
from mindio_adaptor.recovery.training_state import TrainingState


@dataclass
class ReplacementProgress:
    """This process's progress as a replacement for a dead rank (patches/process_replacement)."""
    active: bool = False  # this process was started again for a dead rank
    fake_world: bool = False  # Megatron's start-up runs on the fake backend
    joined: bool = False
    joined_at: Optional[int] = None  # the repair step it joined at
    train_data_iterator: Any = None

    @property
    def awaiting_state(self) -> bool:
        """A replacement that has not yet received its state from a replica peer."""
        return self.active and not self.joined


@dataclass
class Reentry:
    """Megatron's train loop entered again at the repair step (patches/train_reentry)."""
    skip_barriers: bool = False
    first_log_pending: bool = False


@dataclass
class StepReplay:
    """What lets the interrupted step be computed again: the data iterators' replay wrappers and the
    timers that were already running when the step began (e.g. the train loop's interval timer)."""
    iterators: Dict[int, Any] = field(default_factory=dict)  # id(Megatron's iterator) -> ReplayableIterator
    timers_running_before_step: Set[str] = field(default_factory=set)


@dataclass
class InterruptedSaves:
    """Checkpoint saves a fault may leave unfinished (patches/interrupted_save)."""
    iteration: Optional[int] = None  # of the save of this rank that raised, until the decision
    scheduled: Deque[int] = field(default_factory=lambda: collections.deque(maxlen=64))  # async, oldest first


@dataclass
class RecoverySession:
    # The job's high-availability settings as validated with Megatron's arguments (patches/arguments): the one
    # place the adaptor reads them from. Until then every feature is off.
    config: HighAvailabilityConfig = field(default_factory=HighAvailabilityConfig)
    job: TrainingState = field(default_factory=TrainingState)
    thread: TrainingThread = field(default_factory=TrainingThread)
    timeline: Timeline = field(default_factory=Timeline)
    latest: Optional[StepSnapshot] = None  # of the last step this rank completed
    received: Optional[dict] = None  # the repair step's state from a replica peer, until installed
    replacement: ReplacementProgress = field(default_factory=ReplacementProgress)
    reentry: Reentry = field(default_factory=Reentry)
    replay: StepReplay = field(default_factory=StepReplay)
    losses: LossLineBook = field(default_factory=LossLineBook)  # each step's loss line (patches/loss_lines)
    save_root: Optional[str] = None  # --save as the run started; a dump points args.save elsewhere meanwhile
    next_comm_epoch: int = 1
    comm_reinits_in_place: int = 0  # since this process's group objects were created (core/communication/comm_in_place)
    scale_in: Any = None  # core.layout.scale_in_plan.ScaleInPlan of the scale-in under way or done
    scale_out: Any = None  # core.layout.scale_out_plan.ScaleOutPlan of the last scale-out (a survivor's; None: none)
    comm_store: str = ""  # host:port of the store the last rebuild met at (core/job/paired_store chose it)
    flow: Optional[str] = None  # the flow of the recovery under way (recovery/flows.FLOWS), set by its actions
    leaving: Optional[str] = None  # why this rank leaves the job (a scale-in dropped its slice, core/detection/leaving_rank)
    saves: InterruptedSaves = field(default_factory=InterruptedSaves)
    train_returned: bool = False  # Megatron's train loop returned: a save now is the final one
    termination: threading.Event = field(default_factory=threading.Event)  # the process got SIGTERM
    section_clock: Any = None  # patches/sections.SectionClock, once the processor is connected
    status_server: Any = None  # status/server.StatusServer, on the rank hosting the controller when asked for
    # The rebuilds of this process's communicators (recovery/comm_rebuild), which the stages reach through the
    # session as they reach Megatron through their facade parameter: a unit test gives a stand-in.
    communicators: Any = comm_rebuild

    def snapshot_of(self, step: int, purpose: str) -> StepSnapshot:
        """The snapshot of `step`, or an error saying which step this rank has instead."""
        if self.latest is None or self.latest.iteration != step:
            have = "none" if self.latest is None else f"step {self.latest.iteration}"
            raise RuntimeError(f"asked to {purpose} step {step}, but this rank's last consistent snapshot is {have}")
        return self.latest

    def resume_at(self, snapshot: StepSnapshot) -> None:
        """A recovery put this rank's state at `snapshot`'s step (rolled back to it, took it from a peer,
        reloaded it, resized at it): the last completed step is that one, and training goes on after it. The
        one writer of both besides the step that completes: a rank ahead of the step had completed later
        ones, whose completion must count again."""
        self.latest = snapshot
        steps = self.job.completed_steps
        if not steps or steps[-1] != snapshot.iteration:
            steps.append(snapshot.iteration)

    def is_behind(self, step: int) -> bool:
        """This rank has no snapshot of `step` (the repair step) of its own."""
        return self.latest is None or self.latest.iteration != step


SESSION = RecoverySession()
