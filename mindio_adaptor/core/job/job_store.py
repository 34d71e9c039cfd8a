"""The job's rendezvous stores as a place for the few facts a replacement process needs and cannot ask its
peers for during its start-up: it joins a running job whose collectives it cannot take part in until the
communicators are rebuilt with it (the controller's address and token, the replica layout's inputs, the
last communicator epoch). Under a launcher that hosts the stores (torchrun, `mindio-adaptor launch`) they
outlive any worker. torch.distributed only.

Every fact is sealed with the job's token (MINDIO_TOKEN; core/job/sealed_values) and unpickled only once its seal
holds: a store is open to whoever reaches its port, and a pickle is code. A value without the seal is taken
for absent and reported once. The token itself is never a fact.

A fact is written to every store of the job that answers (MINDIO_STORE_ADDRS: one per controller-hosting
node, so that no fact lives only on node 0; else the one at MASTER_ADDR:MASTER_PORT), a dead one skipped
within core/job/paired_store's probe. It is read from the store paired with this process's controller
(core/job/paired_store.choose)."""
from __future__ import annotations

import logging
import os
import pickle
from datetime import timedelta
from typing import Any, Dict, List, Sequence, Tuple

import torch.distributed as dist

from mindio_adaptor.core.job import paired_store
from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue

logger = logging.getLogger(__name__)

PREFIX = "mindio/facts/"
SCOPE = "mindio job facts"  # what the seals are bound to beside the key (the token binds them to the job)
LAYOUT_INPUTS = "layout_inputs"  # every rank's replica-layout inputs, for a replacement process (patches/parallel_state)
_clients: Dict[Tuple[str, int], SealedStore] = {}


class JobStoreError(RuntimeError):
    pass


def _report_unsealed(err: UnsealedValue) -> None:
    logger.warning("the job's store: %s (someone who reached the store's port wrote it)", err)


def has_token() -> bool:
    """Whether this process can read and write the job's facts: it holds the job's token."""
    return bool(os.environ.get(ENV_TOKEN))


def sealed(store: dist.Store, token: str) -> SealedStore:
    """`store` with the facts' values sealed under `token`."""
    if not token:
        raise JobStoreError(f"the job's facts are read and written only with the job's token, and this process "
                            f"has none ({ENV_TOKEN} is not set; mindio-adaptor launch gives it to every worker)")
    return SealedStore(store, token, SCOPE, report=_report_unsealed)


def _connect(address: Tuple[str, int], timeout_s: float) -> SealedStore:
    client = _clients.get(address)
    if client is None:
        host, port = address
        try:
            raw = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s),
                                wait_for_workers=False)
        except Exception as exc:
            raise JobStoreError(f"the job's store at {host}:{port} is not reachable: {exc}") from exc
        client = sealed(raw, os.environ.get(ENV_TOKEN, ""))
        _clients[address] = client
    return client


def _chosen(timeout_s: float) -> Tuple[Tuple[str, int], dist.Store]:
    try:
        address = paired_store.choose(probe_s=min(timeout_s, paired_store.PROBE_S))
    except (paired_store.NoStoreAnswers, ValueError) as exc:
        raise JobStoreError(str(exc)) from exc
    return address, _connect(address, timeout_s)


def _where(address: Tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def publish(name: str, value: Any, timeout_s: float = 30.0) -> None:
    """Write the fact to every store that answers; JobStoreError when none took it."""
    if not has_token():
        sealed(None, "")  # says why: without the token no fact is written (nor could one be read)
    up, down = paired_store.answering(probe_s=min(timeout_s, paired_store.PROBE_S))
    written: List[Tuple[str, int]] = []
    for address in up:
        try:
            _connect(address, timeout_s).set(PREFIX + name, pickle.dumps(value))
            written.append(address)
        except Exception as exc:  # died since the probe: skipped like one that did not answer
            _clients.pop(address, None)
            down.append(address)
            logger.info("'%s' not published in the store at %s: %s", name, _where(address), exc)
    if not written:
        raise JobStoreError(f"'{name}' could not be published: no store of the job answered "
                            f"({', '.join(map(_where, down)) or 'none known'})")


def read(name: str, timeout_s: float = 60.0) -> Any:
    """The value published under `name`, waiting up to timeout_s for it to appear."""
    address, store = _chosen(timeout_s)
    try:
        store.wait([PREFIX + name], timedelta(seconds=timeout_s))
        return pickle.loads(store.get(PREFIX + name))
    except JobStoreError:
        raise
    except Exception as exc:
        _clients.pop(address, None)
        raise JobStoreError(f"'{name}' was not published in the job's store at {_where(address)} within "
                            f"{timeout_s:.0f} s: {exc}") from exc


def read_or(name: str, default: Any, timeout_s: float = 30.0) -> Any:
    address, store = _chosen(timeout_s)
    try:
        return pickle.loads(store.get(PREFIX + name)) if store.check([PREFIX + name]) else default
    except Exception as exc:
        _clients.pop(address, None)
        raise JobStoreError(f"the job's store at {_where(address)} failed reading '{name}': {exc}") from exc


def copy_into(address: Tuple[str, int], names: Sequence[str], timeout_s: float = 30.0) -> List[str]:
    """Write the facts `names`, as this process reads them, into the store at `address` (a store that
    joined the job late and may lead it later); returns the names copied (a fact never published is not)."""
    copied = []
    for name in names:
        value = read_or(name, _MISSING, timeout_s)
        if value is _MISSING:
            continue
        write_into(address, name, value, timeout_s)
        copied.append(name)
    return copied


def write_into(address: Tuple[str, int], name: str, value: Any, timeout_s: float = 30.0) -> None:
    """Write one fact into the store at `address` only."""
    try:
        _connect(address, timeout_s).set(PREFIX + name, pickle.dumps(value))
    except Exception as exc:
        _clients.pop(address, None)
        raise JobStoreError(f"'{name}' could not be written into the store at {_where(address)}: {exc}") from exc


_MISSING = object()


def forget_connections() -> None:
    """Drop every cached client (tests; a store that came back on the same address)."""
    _clients.clear()


def read_at(host: str, port: int, name: str, token: str, timeout_s: float = 2.0) -> Any:
    """The value published under `name` in the store at host:port (not this process's job store: a
    launcher reads its workers' store), or None when it was not published (or not with `token`)."""
    store = sealed(dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s),
                                 wait_for_workers=False), token)
    return pickle.loads(store.get(PREFIX + name)) if store.check([PREFIX + name]) else None
