"""Which failure domain (node) a rank is in, for the replica layout's spread (patches/parallel_state)."""
import socket

import pytest

from mindio_adaptor.patches import parallel_state
from mindio_adaptor.patches.parallel_state import failure_domain


@pytest.fixture(autouse=True)
def world_of_four(monkeypatch):
    monkeypatch.setattr(parallel_state.dist, "get_world_size", lambda: 4)
    monkeypatch.delenv("MINDIO_FAILURE_DOMAINS", raising=False)
    monkeypatch.delenv("MINDIO_FAILURE_DOMAIN", raising=False)


def test_the_host_name_without_anything_said():
    assert failure_domain(2) == socket.gethostname()


def test_the_launchers_node_then_the_list_for_every_rank(monkeypatch):
    monkeypatch.setenv("MINDIO_FAILURE_DOMAIN", "host/node1")
    assert failure_domain(2) == "host/node1"
    monkeypatch.setenv("MINDIO_FAILURE_DOMAINS", "a, b,a,b")
    assert [failure_domain(r) for r in range(4)] == ["a", "b", "a", "b"]


def test_a_list_of_the_wrong_length_is_refused(monkeypatch):
    monkeypatch.setenv("MINDIO_FAILURE_DOMAINS", "a,b")
    with pytest.raises(ValueError, match="lists 2 domains for a world of 4 ranks"):
        failure_domain(0)
