import pytest

# Short fault-collection window and action limit: the controller tests time flows, not production waits.
FAST_ENV = {"MINDIO_FAULT_COLLECT_TIME": "0.2", "MINDIO_TEST_ACTION_TIME_LIMIT": "5"}


@pytest.fixture
def job_env(monkeypatch):
    for key, value in FAST_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture(autouse=True)
def no_cluster_callbacks_carried_over():
    """Cluster-manager callbacks outlive a controller (as the reference's do): one test's must not reach
    the next test's controller."""
    from mindio_adaptor.ttp import controller

    yield
    controller._cluster_callbacks.clear()


@pytest.fixture
def cluster(tmp_path):
    """Two nodes' launchers with shell workers (shell_launchers.Cluster); whatever is left is SIGKILLed."""
    from shell_launchers import Cluster

    c = Cluster(tmp_path)
    yield c
    c.stop()
