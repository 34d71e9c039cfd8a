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
one-element list, whose any() is the gather's."""
import multiprocessing
import os
import signal

import torch

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
    return result


def _any_rank_signalled(wrapped, instance, args, kwargs):
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return wrapped(*args, **kwargs)
    return _SIGNAL_CHECK(instance)


def _reduced_flag(instance) -> list:
    device = _signal_module(instance).get_device()
    flag = _FLAGS.get(device)
    if flag is None:
        flag = _FLAGS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    flag.fill_(int(bool(instance._signal_received)))
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return [bool(flag.item())]


def _signal_module(instance):
    import sys

    return sys.modules[type(instance).__module__]


_FLAGS = {}  # device -> the one-int tensor the check reduces, kept from step to step
_SIGNAL_CHECK = COSTS.timed("signal check", _reduced_flag)


PATCHES = [
    Patch("megatron.training.dist_signal_handler", "DistributedSignalHandler.__enter__",
          _training_process_only),
    Patch("megatron.training.dist_signal_handler", "DistributedSignalHandler.signals_received", _any_rank_signalled),
]
