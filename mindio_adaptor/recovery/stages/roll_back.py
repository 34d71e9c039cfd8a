"""ROLLBACK to the repair step. A rank behind it (a replacement; a rank whose step the other replica
instance completed) first takes the received state as its own; a replacement's data iterator, built
at sample 0, is positioned at the step's sample. Then on every rank: model params re-derived from the
main params (each writes its shard, then the instance all-gathers), RNG states back to the repair
step's snapshot, the data iterator positioned after the repair step (an interrupted next step's
micro-batches are given again), Megatron's timers running as before the step and its rerun state reset, and the
step told to the controller; the training thread then computes the step after the repair step
(patches/exception_loop)."""
import logging

from mindio_adaptor.core.job import processor_link
from mindio_adaptor.recovery.stages.stage import Stage

logger = logging.getLogger(__name__)


def roll_back(session, megatron, action) -> int:
    step, job = action.step, session.job
    if session.replacement.awaiting_state:
        install_received_state(session, megatron, step)
        session.replacement.joined_at = step
        _position_replacement_data(session, megatron)
    elif session.is_behind(step):
        install_received_state(session, megatron, step)
    snapshot = session.snapshot_of(step, "roll back to")
    megatron.rederive_model_params(job.model, job.optimizer)
    megatron.restore_rng(snapshot.rng)
    replayed = sum(it.position_after(step) for it in session.replay.iterators.values())
    # Timers started by the interrupted step are never stopped by it; the loop's interval timer, stopped by a fault
    # inside a loss line's reading, must run on.
    megatron.set_running_timers(frozenset(session.replay.timers_running_before_step))
    megatron.reset_rerun_state()
    _report_to_the_controller(step)
    logger.info("rollback to step %d: params re-derived, RNG restored, %d micro-batch(es) to replay", step,
                replayed)
    session.timeline.mark("rolled back", f"to step {step}")
    return 0


def install_received_state(session, megatron, step: int):
    """A rank behind the repair step takes the peer's state of `step` as its own."""
    if session.received is None:
        raise RuntimeError(f"asked to roll back to step {step}, which this rank never completed, without "
                           f"having received that step's state from a replica peer")
    received, session.received = session.received, None
    snapshot = received["snapshot"]
    if snapshot.iteration != step:
        raise RuntimeError(f"received the state of step {snapshot.iteration}, asked to roll back to step {step}")
    megatron.set_iteration_state(snapshot)
    megatron.set_valid_position(received["consumed_valid_samples"])
    megatron.install_step_state(received, session.job.scheduler, session.job.optimizer)
    session.resume_at(snapshot)
    logger.info("took step %d's state (iteration, data position at sample %d, scheduler, RNG) from the "
                "replica peer", step, snapshot.consumed_train_samples)
    return snapshot


def _report_to_the_controller(step: int) -> None:
    """Every rank holds the repair step's state now. Until its next update ends its processor would otherwise say
    the step of its own last update in every status it sends: the step before for a rank that took a peer's state,
    none for a new process (the controller counted it behind, and a fault before that update found no complete
    replica of its shards: a chaos run ended so, a kill right after a hot switch), a later one after a reload of an
    earlier checkpoint or a scale-out's state."""
    link = processor_link.current_or_none()
    if link is not None:
        link.report_state_of_step(step)


def _position_replacement_data(session, megatron) -> None:
    """The replacement built its data loaders at sample 0; the job is at the repair step's sample, and its
    evaluations so far consumed the peer's validation samples."""
    megatron.position_train_iterators(session.replacement.train_data_iterator, "replacement process")
    megatron.position_valid_iterators(session.job.valid_data_iterator, "replacement process")


ROLL_BACK = Stage("roll back", roll_back)
