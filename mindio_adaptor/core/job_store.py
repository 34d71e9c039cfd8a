"""The job's rendezvous store (the TCPStore at MASTER_ADDR:MASTER_PORT) as a place for the few facts a
replacement process needs and cannot ask its peers for during its start-up: it joins a running job whose
collectives it cannot take part in until the communicators are rebuilt with it (the controller's address
and token, the replica layout's inputs, the last communicator epoch). Under a launcher that hosts the
store (torchrun, `mindio-adaptor launch`) the store outlives any worker. torch.distributed only."""
from __future__ import annotations

import os
import pickle
from datetime import timedelta
from typing import Any, Optional

import torch.distributed as dist

PREFIX = "mindio/facts/"
_client: Optional[dist.Store] = None


class JobStoreError(RuntimeError):
    pass


def _connect(timeout_s: float) -> dist.Store:
    global _client
    if _client is None:
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT")
        if not port:
            raise JobStoreError("MASTER_PORT is not set: the job's store cannot be found")
        try:
            _client = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s),
                                    wait_for_workers=False)
        except Exception as exc:
            raise JobStoreError(f"the job's store at {host}:{port} is not reachable: {exc}") from exc
    return _client


# Values are pickled: the store is the job's own, unauthenticated as torch.distributed uses it; whoever
# can write to it can already break every communicator of the job.
def publish(name: str, value: Any, timeout_s: float = 30.0) -> None:
    _connect(timeout_s).set(PREFIX + name, pickle.dumps(value))


def read(name: str, timeout_s: float = 60.0) -> Any:
    """The value published under `name`, waiting up to timeout_s for it to appear."""
    store = _connect(timeout_s)
    try:
        store.wait([PREFIX + name], timedelta(seconds=timeout_s))
    except Exception as exc:
        raise JobStoreError(f"'{name}' was not published in the job's store within {timeout_s:.0f} s: "
                            f"{exc}") from exc
    return pickle.loads(store.get(PREFIX + name))


def read_or(name: str, default: Any, timeout_s: float = 30.0) -> Any:
    store = _connect(timeout_s)
    return pickle.loads(store.get(PREFIX + name)) if store.check([PREFIX + name]) else default


def read_at(host: str, port: int, name: str, timeout_s: float = 2.0) -> Any:
    """The value published under `name` in the store at host:port (not this process's job store: a
    launcher reads its workers' store), or None when it was not published."""
    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    return pickle.loads(store.get(PREFIX + name)) if store.check([PREFIX + name]) else None
