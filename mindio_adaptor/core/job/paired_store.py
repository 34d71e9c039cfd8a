"""Which of the job's stores a worker uses: the one paired with the controller it is registered with.

With controllers hosted by the launchers (`mindio-adaptor launch --controllers K`), each hosting node also
hosts a workers' store for the generation, next to its controller, and every worker gets the list in
node order as MINDIO_STORE_ADDRS (parallel to MINDIO_CONTROLLER_ADDR). Node 0's is MASTER_ADDR:MASTER_PORT.
When node 0 is lost, its controller and its store go together; the survivors register with the next
controller and from then on meet (core/communication/comm's epochs) and read the job's facts (core/job/job_store) at the
store beside it, which still lives. So the store is chosen by the registration, the one thing every
survivor has in common after a takeover, and not by whichever store happens to answer first: two
survivors must never meet at different stores.

Before any registration (a replacement reading the job's facts during its start), or when the paired
store does not answer, the first store of the list that answers is used (before a registration, never
the new store of a node that re-hosts its slot: core/job/rehosted_slot). Without a list, the only store
is MASTER_ADDR:MASTER_PORT, as before.
"""
from __future__ import annotations

import os
import socket
from typing import Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from mindio_adaptor.core.job.controller_address import controller_addresses

ENV_STORES = "MINDIO_STORE_ADDRS"
# Set by a launcher that replaced a lost node and hosts its slot again (core/job/rehosted_slot): that store is
# new and holds none of the job's facts until the members adopt it.
ENV_REHOSTED_SLOT = "MINDIO_REHOSTED_SLOT"
# The fact the members write into a re-hosted slot's new store once they adopted it (core/job/rehosted_slot): from
# then on it holds the job's facts like the others, and a process starting on that node need not skip it nor
# announce the slot again. The launcher hosting that store reads it (launch/membership).
REHOSTED_STORE_ADOPTED = "control/rehosted_store_adopted"
PROBE_S = 2.0  # a store that does not accept a connection within this is skipped (a dead host's silence)
# The paired store is given longer: members that fell back from it on a slow answer would meet elsewhere
# than the others. A dead host refuses at once (its port closed) or stays silent; only silence costs this.
PAIRED_PROBE_S = 10.0

Address = Tuple[str, int]


class NoStoreAnswers(RuntimeError):
    """None of the job's stores accepts a connection; the message names every one tried."""


def store_addresses(environ: Mapping[str, str] = os.environ) -> List[Address]:
    """The job's stores in node order: MINDIO_STORE_ADDRS, else MASTER_ADDR:MASTER_PORT alone, else none."""
    value = environ.get(ENV_STORES)
    if value:
        return [_endpoint(part.strip(), value) for part in value.split(",")]
    port = environ.get("MASTER_PORT")
    return [(environ.get("MASTER_ADDR", "127.0.0.1"), int(port))] if port else []


def _endpoint(part: str, value: str) -> Address:
    host, sep, port = part.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{ENV_STORES}={value!r}: expected host:port,host:port,... with ports in 1..65535, "
                         f"got {part!r}")
    return host, int(port)


def paired_index(controllers: Optional[Sequence[Address]], registered: str) -> Optional[int]:
    """The position of `registered` ("host:port", the controller this rank registered with; "" for none)
    in the controllers' list, or None."""
    if not controllers or not registered:
        return None
    host, _, port = registered.rpartition(":")
    if not port.isdigit():
        return None
    for index, (c_host, c_port) in enumerate(controllers):
        if c_port == int(port) and _same_host(c_host, host):
            return index
    return None


def _same_host(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return socket.gethostbyname(a) == socket.gethostbyname(b)
    except OSError:
        return False


def answers(address: Address, timeout_s: float = PROBE_S) -> bool:
    """Whether the store at `address` accepts a connection (a refused one fails at once, a silent host
    within timeout_s): a TCPStore client would retry a refused connection for its whole timeout."""
    try:
        with socket.create_connection(address, timeout=timeout_s):
            return True
    except OSError:
        return False


def registered_controller() -> str:
    from mindio_adaptor.core.job import processor_link  # here: the launchers read ENV_STORES without the native module

    link = processor_link.current_or_none()
    return link.controller_address() if link is not None else ""


def choose(stores: Optional[Sequence[Address]] = None, controllers: Optional[Sequence[Address]] = None,
           registered: Optional[str] = None, probe_s: float = PROBE_S,
           paired_probe_s: float = PAIRED_PROBE_S) -> Address:
    """The store this process uses now: the one paired with its controller when that answers (within
    paired_probe_s), else the first of the list that answers (within probe_s each). Raises NoStoreAnswers
    naming every store tried."""
    stores = store_addresses() if stores is None else list(stores)
    if not stores:
        raise NoStoreAnswers(f"no store known: neither {ENV_STORES} nor MASTER_PORT is set")
    if controllers is None:
        controllers = controller_addresses()
    index = paired_index(controllers, registered_controller() if registered is None else registered)
    paired = stores[index] if index is not None and index < len(stores) else None
    if paired is not None and answers(paired, paired_probe_s):
        return paired
    tried = [paired] if paired is not None else []
    # Before any registration, not this node's new store (if it re-hosts its slot): it has no facts yet.
    skipped = [_rehosted_store(stores)] if paired is None else []
    for address in stores:
        if address in tried or address in skipped:
            continue
        if answers(address, probe_s):
            return address
        tried.append(address)
    raise NoStoreAnswers("none of the job's stores answered within %g s: %s" % (
        probe_s, ", ".join(f"{h}:{p}" for h, p in tried)))


def rehosted_slot(environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """The slot this process's node re-hosts (its launcher replaced a lost controller-hosting node), or None."""
    value = environ.get(ENV_REHOSTED_SLOT, "")
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"{ENV_REHOSTED_SLOT}={value!r}: expected the index of a slot of the controllers' list")
    return int(value)


def _rehosted_store(stores: Sequence[Address]) -> Optional[Address]:
    slot = rehosted_slot()
    return stores[slot] if slot is not None and slot < len(stores) else None


def answering(stores: Optional[Sequence[Address]] = None, probe_s: float = PROBE_S) -> Tuple[List[Address], List[Address]]:
    """(the stores that answer, those that do not), each in list order: where a fact is published."""
    stores = store_addresses() if stores is None else list(stores)
    up, down = [], []
    for address in stores:
        (up if answers(address, probe_s) else down).append(address)
    return up, down


def control_ports(environ: Mapping[str, str] = os.environ, also: Iterable[int] = ()) -> Set[int]:
    """The ports of the job's control plane, whose connections a stop must not shut down (core/communication/comm_abort):
    every store and every controller of the lists (a takeover moves to the next of each) and `also` (the
    in-job controller's)."""
    stores = (port for _, port in store_addresses(environ))
    controllers = (port for _, port in controller_addresses(environ) or ())
    return {int(environ.get("MASTER_PORT", 0)), *stores, *controllers, *also} - {0}
