import pytest

# Short fault-collection window and action limit: the controller tests time flows, not production waits.
FAST_ENV = {"MINDIO_FAULT_COLLECT_TIME": "0.2", "MINDIO_TEST_ACTION_TIME_LIMIT": "5"}


@pytest.fixture
def job_env(monkeypatch):
    for key, value in FAST_ENV.items():
        monkeypatch.setenv(key, value)
