"""recovery/replacement_join: a replacement numbers its communicator epochs after the job's last one,
reports ready ("ARF FINISH") and waits like a faulted rank; once repaired it enters the train loop as a
resumed one. The controller's side is played by the test: what wait_for_decision would serve."""
from datetime import timedelta

import pytest

from recovery_fakes import session_at
from mindio_adaptor.core.job import job_store
from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.recovery.comm_rebuild import LAST_EPOCH
from mindio_adaptor.recovery.replacement_join import join_as_replacement


@pytest.fixture
def job_store_at(monkeypatch):
    store = host_store(0, "127.0.0.1", timeout=timedelta(seconds=10))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(store.port))
    monkeypatch.setenv("MINDIO_TOKEN", "join-test-token")  # the job's facts are sealed with it
    monkeypatch.delenv("MINDIO_STORE_ADDRS", raising=False)
    job_store.forget_connections()
    yield store
    job_store.forget_connections()


def test_a_replacement_joins_after_the_jobs_last_epoch_and_reenters_as_resumed(job_store_at):
    job_store.publish(LAST_EPOCH, 4)
    session = session_at(None)
    session.replacement.active = True
    session.thread.stop_requested.set()  # left over from the wait: cleared when it resumes
    waited = []

    def controller_repairs(s, exc, step, replacement=False):  # REBUILD_GROUP, REPAIR, ROLLBACK, RETRY
        waited.append((str(exc), step, replacement, s.next_comm_epoch))
        s.replacement.joined_at = 6

    iterator = object()
    join_as_replacement(session, iterator, wait_for_decision=controller_repairs)
    assert waited == [("ARF FINISH", 0, True, 5)]
    assert session.replacement.joined and not session.replacement.awaiting_state
    assert session.replacement.train_data_iterator is iterator
    assert session.reentry.skip_barriers and session.reentry.first_log_pending
    assert not session.thread.stop_requested.is_set()


def test_the_first_replacement_of_a_job_starts_at_epoch_one(job_store_at):
    session = session_at(None)
    join_as_replacement(session, None, wait_for_decision=lambda s, exc, step, replacement=False: None)
    assert session.next_comm_epoch == 1
