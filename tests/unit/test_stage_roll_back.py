"""stages/roll_back: every rank goes back to the repair step; a rank behind it first takes the state
a replica peer sent; a replacement's data loader is positioned at the step's sample."""
from types import SimpleNamespace

import pytest
from recovery_fakes import FakeMegatron, FakeReplay, action, marks, session_at, snapshot

from mindio_adaptor.core.job import processor_link
from mindio_adaptor.recovery.stages.roll_back import ROLL_BACK, roll_back


def rollback(step):
    return action("rollback", strategy="retry", step=step)


def received(step):
    return {"snapshot": snapshot(step), "consumed_valid_samples": 32, "scheduler": {"num_steps": step},
            "lazy_caches": [{}]}


class ProcessorLinkSeen:
    def __init__(self):
        self.steps = []

    def report_state_of_step(self, step):
        self.steps.append(step)


@pytest.fixture
def link(monkeypatch):
    seen = ProcessorLinkSeen()
    monkeypatch.setattr(processor_link, "_link", seen)
    return seen


def test_rollback_on_a_rank_behind_the_repair_step_installs_the_received_snapshot_and_positions_the_replay(link):
    session, megatron = session_at(4), FakeMegatron()
    session.received = received(5)
    replay = FakeReplay(replayed=2)
    session.replay.iterators[1] = replay
    session.replay.timers_running_before_step = {"interval-time"}
    assert roll_back(session, megatron, rollback(5)) == 0
    assert megatron.names() == ["set_iteration_state", "set_valid_position", "install_step_state",
                                "rederive_model_params", "restore_rng", "set_running_timers", "reset_rerun_state"]
    assert megatron.called("set_valid_position") == [(32,)]  # the peer's evaluations so far
    assert megatron.called("install_step_state") == [({"num_steps": 5},)]
    assert megatron.called("restore_rng") == [({"rng of step": 5},)]
    assert megatron.called("set_running_timers") == [({"interval-time"},)]  # the timers running before the step
    assert session.latest == snapshot(5) and session.received is None
    assert session.job.completed_steps == [5]
    assert replay.positions == [5]
    assert marks(session) == ["rolled back"]
    assert link.steps == [5]  # the controller counts the rank at the step it took, not behind
    assert ROLL_BACK.on_training_thread


def test_a_rank_at_the_repair_step_keeps_its_own_state(link):
    session, megatron = session_at(5), FakeMegatron()
    assert roll_back(session, megatron, rollback(5)) == 0
    assert link.steps == [5]  # every rank says the step it holds now
    assert "set_iteration_state" not in megatron.names() and "install_step_state" not in megatron.names()
    assert megatron.called("restore_rng") == [({"rng of step": 5},)]
    assert session.job.completed_steps == []


def test_a_rank_behind_without_the_peers_state_is_refused():
    session = session_at(4)
    with pytest.raises(RuntimeError, match="roll back to step 5, which this rank never completed, without having "
                                           "received"):
        roll_back(session, FakeMegatron(), rollback(5))


def test_the_state_of_another_step_is_refused():
    session = session_at(3)
    session.received = received(4)
    with pytest.raises(RuntimeError, match="received the state of step 4, asked to roll back to step 5"):
        roll_back(session, FakeMegatron(), rollback(5))


def test_a_replacement_takes_the_state_joins_at_the_step_and_its_loader_starts_at_the_steps_sample(link):
    session, megatron = session_at(None), FakeMegatron()
    session.replacement.active = True
    session.received = received(6)
    holder = SimpleNamespace(iterable=iter(range(1000)))
    session.replacement.train_data_iterator = holder
    session.job.valid_data_iterator = SimpleNamespace(iterable=iter(range(1000)))
    assert roll_back(session, megatron, action("rollback", strategy="recover", step=6)) == 0
    assert session.replacement.joined_at == 6 and session.latest == snapshot(6)
    assert megatron.called("iterator_at_sample") == [(snapshot(6).consumed_train_samples, "replacement process")]
    assert next(holder.iterable) == snapshot(6).consumed_train_samples
    # its validation loader, built at sample 0 too, goes where the peer's evaluations left theirs
    valid = session.job.valid_data_iterator
    assert megatron.called("position_valid_iterators") == [(valid, 32, "replacement process")]
    assert link.steps == [6]


def test_a_replacement_whose_loader_cannot_be_positioned_is_refused():
    session = session_at(None)
    session.replacement.active = True
    session.received = received(6)
    session.replacement.train_data_iterator = object()  # not Megatron's RerunDataIterator
    with pytest.raises(RuntimeError, match=r"replacement process: cannot position its train data iterator \(object\) "
                                           "at sample 48"):
        roll_back(session, FakeMegatron(), action("rollback", strategy="recover", step=6))


def test_a_replacement_with_a_virtual_pipeline_positions_each_chunks_iterator():
    """With a virtual pipeline train() gets one iterator per model chunk (None where a stage reads no data)."""
    session, megatron = session_at(None), FakeMegatron()
    session.replacement.active = True
    session.received = received(6)
    chunks = [SimpleNamespace(iterable=iter(range(1000))), None, SimpleNamespace(iterable=iter(range(1000)))]
    session.replacement.train_data_iterator = chunks
    roll_back(session, megatron, action("rollback", strategy="recover", step=6))
    assert len(megatron.called("iterator_at_sample")) == 2
    assert [next(chunk.iterable) for chunk in (chunks[0], chunks[2])] == [snapshot(6).consumed_train_samples] * 2
