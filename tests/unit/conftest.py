import pytest


@pytest.fixture(autouse=True)
def no_cluster_callbacks_carried_over():
    """Cluster-manager callbacks outlive a controller (as the reference's do): one test's must not reach
    the next test's controller."""
    from mindio_adaptor.ttp import controller

    yield
    controller._cluster_callbacks.clear()
