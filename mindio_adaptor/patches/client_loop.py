"""Megatron's train and train_step when a client of the reference API handles faults
(recovery/fault_handling, mode "client"): no exception loop of ours, only what the client's handlers
need from Megatron and cannot get themselves.

- At initialisation: the session's save root and backend, the snapshot of each completed step (a
  rollback or a dump needs one), forked helpers closing the rank's connections.
- Each train_step notes what recomputing it needs (recovery/step_replay), as in the adaptor's mode.
- A training exception leaves train() for the client's tft_exception_handler, with the training
  thread marked parked: the stages the client's handlers call run on it while it waits for the
  decision (the link's between_waits, woken by its wake_waits), because device state is per thread. A rank that the
  controller stopped raises "FORCE STOP", as the reference's device layer makes a stopped rank raise,
  so the client reports it as stopped (NORMAL), not as a fault of its own.
- Entered again after the decision (the client's retry), train() starts at the step the rollback
  prepared (patches/train_reentry).
"""
import logging
import os

from mindio_adaptor import megatron as megatron_job
from mindio_adaptor.core.process import inherited_sockets
from mindio_adaptor.recovery import step_replay, train_reentry
from mindio_adaptor.recovery.client_actions import wire_link
from mindio_adaptor.recovery.session import SESSION

logger = logging.getLogger(__name__)


def prepare(margs, take_snapshot) -> None:
    """After Megatron's initialisation, instead of connecting: the client connects later. `take_snapshot(step)`:
    what the adaptor's own link runs as each step completes (patches/controller_link)."""
    SESSION.save_root = margs.save
    SESSION.thread.use_backend(margs.distributed_backend)
    SESSION.job.step_completed.insert(0, take_snapshot)  # before the client's update-ended hooks
    inherited_sockets.install()
    logger.debug("fault handling left to the client (mindio_ttp); rank %s not connected by the adaptor",
                 os.environ.get("RANK", "?"))


def train_step(wrapped, args, kwargs):
    train_reentry.first_step_started(SESSION)
    if len(args) > 1:  # train_step(forward_step_func, data_iterator, ...): replayable for a recompute
        step = megatron_job.current_iteration()
        args = (args[0], step_replay.prepare_step(SESSION, megatron_job, args[1], step), *args[2:])
    return wrapped(*args, **kwargs)


def train(wrapped, args, kwargs):
    SESSION.thread.reset()
    wire_link()
    try:
        return wrapped(*args, **kwargs)
    except Exception as exc:
        stopped = SESSION.thread.stop_requested.is_set()
        SESSION.thread.parked.set()
        if stopped:
            raise RuntimeError(f"FORCE STOP: rank stopped by the controller ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from exc
        raise
