"""core/communication/comm.py in one process: input checks, a store that cannot be reached, a member that never
arrives, members that disagree, and epochs that must only move forward (world of 1, gloo)."""
import json
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from mindio_adaptor.core.communication.comm import CommEpochs, CommError, StoreUnreachable, epoch_prefix, host_store


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def store():
    return host_store(0, "127.0.0.1", timeout=timedelta(seconds=10))


def epochs(store, rank=0, world=1, **kw):
    kw.setdefault("join_timeout", timedelta(seconds=2))
    return CommEpochs(rank, world, "127.0.0.1", store.port, timeout=timedelta(seconds=5),
                      store_timeout=timedelta(seconds=5), **kw)


@pytest.mark.parametrize("members,text", [
    ([0, 1, 1, 2], "duplicate ranks [1]"), ([0, 4], "unknown ranks [4]"), ([0, -1], "unknown ranks [-1]"),
    ([0, "1"], "unknown ranks ['1']"), ([1, 2, 3], "do not contain this process's rank 0"), ([], "empty"),
])
def test_bad_members_raise_value_error_before_touching_the_store(members, text):
    ce = CommEpochs(0, 4, "127.0.0.1", free_port())  # nothing listens there: validation comes first
    with pytest.raises(ValueError) as err:
        ce.join(0, members)
    assert text in str(err.value)
    with pytest.raises(ValueError):
        ce.rebuild(1, members)


def test_bad_specs_and_missing_port(monkeypatch):
    ce = CommEpochs(0, 4, "127.0.0.1", 1)
    for lists in ([[0, 4]], [[0, 0]], [[]]):
        with pytest.raises(ValueError, match="group spec 'dp'"):
            ce.register("dp", lists)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(ValueError, match="MASTER_PORT"):
        CommEpochs(0, 4)
    with pytest.raises(ValueError):
        CommEpochs(4, 4, port=1)


def test_unreachable_store_names_the_address_within_the_timeout():
    port = free_port()
    ce = CommEpochs(0, 2, "127.0.0.1", port, store_timeout=timedelta(seconds=2))
    start = time.monotonic()
    with pytest.raises(StoreUnreachable, match=f"store at 127.0.0.1:{port} not reachable within 2s"):
        ce.join(0, [0, 1])
    assert time.monotonic() - start < 8
    assert not dist.is_initialized()


def test_missing_member_is_named(store):
    ce = epochs(store, world=3, join_timeout=timedelta(seconds=1))
    start = time.monotonic()
    with pytest.raises(CommError, match=rf"epoch 0: ranks \[1, 2\] did not arrive at store 127.0.0.1:{store.port} "
                                        r"within 1s"):
        ce.join(0, [0, 1, 2])
    assert time.monotonic() - start < 5
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="even a failed one"):  # its arrival keys are in the store
        ce.join(0, [0, 1, 2])


def test_members_that_disagree_never_meet(store):
    # rank 1's arrival as it is written on the wire, with another view of the membership
    store.set(f"{epoch_prefix(0)}/arrive/1", json.dumps({"pid": 1, "members": [1, 0]}))
    with pytest.raises(CommError, match=r"members disagree: rank 0 has \[0, 1\], others have \{1: \[1, 0\]\}"):
        epochs(store, world=2).join(0, [0, 1])
    assert not dist.is_initialized()


def test_epochs_only_move_forward_and_groups_come_back(store):
    ce = epochs(store, world=1)
    ce.register("solo", [[0]])
    try:
        first = ce.join(0, [0])
        with pytest.raises(CommError, match="already initialised"):
            ce.join(1, [0])
        with pytest.raises(ValueError, match="not newer than the last epoch tried, 0"):
            ce.rebuild(0, [0])
        groups = ce.rebuild(1, [0])
        assert ce.last_teardown in ("abort", "destroy") and ce.membership.epoch == 1
        assert groups["solo"] is not first["solo"]
        x = torch.ones(2)
        dist.all_reduce(x, group=groups["solo"])
        assert x.tolist() == [1.0, 1.0]
    finally:
        ce.close()
    assert not dist.is_initialized()
