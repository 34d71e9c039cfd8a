"""Megatron's SIGTERM handler (--exit-signal-handler, on with --enable-high-availability) only sets a
flag; Megatron installs it in the training process and again in every DataLoader worker. A worker that
swallows SIGTERM cannot be ended by multiprocessing when its parent exits, so a rank that crashes hangs
forever in its own exit. We keep the flag in the training process only: a DataLoader worker (a
multiprocessing child), or any other process forked after the handler was installed, dies of SIGTERM as
usual. Under torchrun the workers never get the launcher's SIGTERM themselves (it signals the ranks),
so a graceful stop still ends the current step and saves. The signal is also remembered for a rank
parked after a fault (the session's `termination`): it ends a step no more, but tells the rank its launcher wants it gone.

Megatron asks every rank after every step whether any rank got the signal: an all_gather of one int per rank, into
as many new tensors, each read back with its own `.item()`. Its one caller only asks whether any is set, so the
question is one all_reduce (MAX) of one int, into a tensor kept from step to step: on the tiny dp4 job high
availability cost 13% per step with the gather and 1-3% with the reduction (bench/replica_overhead.py, issue 49),
and at scale the gather's size and its W reads grow with the world while the reduction's does not. The answer is a
one-element list, whose any() is the gather's.

The reduction is started when the step's optimizer step begins (the ranks have just met in the gradients' reduction)
and runs beside the update, the loss reduction and the line; the check after the step only waits for its answer.
A signal that comes during the update is answered one step later. Every rank takes the same path: the started
reduction where it belongs to the step just completed on the current communicators, else (the first check after a
recovery, whose rebuilt communicators abandoned it, or a step whose optimizer never ran) the reduction done at
once."""
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from mindio_adaptor.core.steps.step_path_costs import COSTS
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
    CHECK.handler = instance
    if _START not in SESSION.job.before_optimizer_step:
        SESSION.job.before_optimizer_step.append(_START)
    return result


@dataclass
class StartedReduction:
    """The signal reduction a step's optimizer step started: the step, the communicators' generation it ran on (a
    rebuild, in place or not, makes a new one), the work and its tensor."""
    step: int
    generation: tuple
    work: object
    flag: torch.Tensor


class SignalCheck:
    """This process's answer to "did any rank get SIGTERM?". One per process, as Megatron's handler is: the handler
    (in the training process), the reduction the last optimizer step started until the check takes it, and the
    tensor the reduction done at once reuses."""

    def __init__(self):
        self.handler = None
        self.started: Optional[StartedReduction] = None
        self.flags = {}  # device -> the one-int tensor of the reduction done at once, kept from step to step

    def start(self, step: int) -> None:
        generation = _generation()
        if self.handler is None or not dist.is_initialized():
            return
        if self.started and (self.started.step, self.started.generation) == (step, generation):
            return  # started already for this step
        # A tensor per reduction: one abandoned by a recovery must never write into the next one's.
        flag = torch.full((1,), _local_flag(self.handler), dtype=torch.int32, device=_device(self.handler))
        self.started = StartedReduction(step, generation, dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True),
                                        flag)

    def answer(self, instance) -> list:
        started = self.started_for_this_step()
        if started is not None:
            started.work.wait()
            return [bool(started.flag.item())]
        device = _device(instance)
        flag = self.flags.get(device)
        if flag is None:
            flag = self.flags[device] = torch.zeros(1, dtype=torch.int32, device=device)
        flag.fill_(_local_flag(instance))
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return [bool(flag.item())]

    def started_for_this_step(self) -> Optional[StartedReduction]:
        """Taken by the check: the started reduction where it belongs to the step just completed, on the current
        communicators; the same answer on every rank."""
        started, self.started = self.started, None
        completed = SESSION.job.completed_steps
        if started and completed and (started.step, started.generation) == (completed[-1], _generation()):
            return started
        return None


def _local_flag(handler) -> int:
    return int(bool(handler._signal_received))


def _device(handler):
    """Megatron's own choice (its module's get_device: the accelerator for NCCL, else the CPU)."""
    return sys.modules[type(handler).__module__].get_device()


def _generation() -> tuple:
    return SESSION.next_comm_epoch, SESSION.comm_reinits_in_place


def _any_rank_signalled(wrapped, instance, args, kwargs):
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return wrapped(*args, **kwargs)
    return _SIGNAL_CHECK(instance)


CHECK = SignalCheck()
_SIGNAL_CHECK = COSTS.timed("signal check", CHECK.answer)
_START = COSTS.timed("signal start", CHECK.start)


PATCHES = [
    Patch("megatron.training.dist_signal_handler", "DistributedSignalHandler.__enter__",
          _training_process_only),
    Patch("megatron.training.dist_signal_handler", "DistributedSignalHandler.signals_received", _any_rank_signalled),
]
