"""A launcher that lost node 0: how long it waits for a new node 0, and how it sees one come.

Node 0's launcher hosts the launchers' store. When it dies, the other launchers keep their workers and
try the same address again, for at most `--node0-wait` seconds: a new launcher started with
`--node-rank 0` (a rescheduled pod keeps its index and DNS name) hosts a fresh store there, and the
survivors write back into it what the job needs (launch/node_store.rejoin_entries). Past the wait, a
launcher ends as it did before this existed: it stops its workers and exits 1 naming the lost store.
A standby takes node 0's place itself, warm, where node 0's address can be hosted on its host (a floating
address moved to it, or the same host): `can_host`.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from mindio_adaptor.core.job.paired_store import answers

REJOIN_PERIOD_S = 0.5  # between tries at node 0's address after it was lost
# How a launcher's wait for a new node 0 ended (wait_for_new_node0).
REJOINED, SIGNALLED, WORKERS_DONE, NONE_CAME = "rejoined", "signalled", "workers done", "none came"


@dataclass
class Node0Outage:
    """From the moment the store was lost: the deadline, and what the log says about it."""

    wait_s: float
    since: float = field(default_factory=time.monotonic)
    since_wall: float = field(default_factory=time.time)

    def __post_init__(self):
        if not self.wait_s > 0:
            raise ValueError(f"the wait for a new node 0 must be > 0 s, got {self.wait_s}")

    def elapsed(self, now: float = None) -> float:
        return (time.monotonic() if now is None else now) - self.since

    def remaining(self, now: float = None) -> float:
        return max(0.0, self.wait_s - self.elapsed(now))

    def over(self, now: float = None) -> bool:
        return self.remaining(now) <= 0

    def started_at(self) -> str:
        """The wall-clock time of the loss, UTC, for the log (the nodes' logs are read side by side)."""
        return datetime.fromtimestamp(self.since_wall, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def store_listening(addr: str, port: int, timeout: float) -> bool:
    """Whether something accepts connections at addr:port. A plain probe before a TCPStore client: a
    client that cannot connect logs a stack trace per try, and the wait may last minutes."""
    return answers((addr, port), timeout)


def can_host(addr: str, port: int) -> bool:
    """Whether this host could listen at addr:port now: the address is one of its own (a floating address
    that moved here, or the same host) and nothing listens there. A store server listens on every address,
    so binding the port alone would succeed on any host, where the other launchers would never reach it."""
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError:
                continue
            return True
    return False


def wait_for_new_node0(config, store, err, log, lists, generation: int, ended: bool, signalled: Callable[[], bool],
                       workers_done: Callable[[], bool]) -> str:
    """A launcher whose workers keep running rejoins the store a new node 0 hosts at node 0's address
    (NodeStore.rejoin writes back what the job needs from `lists`, launch/membership.KnownLists), for at most
    --node0-wait seconds; REJOINED, or why it stopped waiting: SIGNALLED, WORKERS_DONE (the job's end reached
    this node meanwhile), NONE_CAME."""
    outage = Node0Outage(config.node0_wait)
    log.info("node %d lost the launchers' store at %s:%d (node 0's launcher) at %s: %s; this node's workers keep "
             "running while it waits up to %g s (--node0-wait) for a new node 0 at that address", config.node_rank,
             config.master_addr, store.port, outage.started_at(), err, config.node0_wait)
    while not outage.over():
        if signalled():
            return SIGNALLED
        if workers_done():
            return WORKERS_DONE
        if store.rejoin(generation, ended, lists.controllers, lists.stores):
            log.info("rejoined the launchers' store of a new node 0 after %.1f s: wrote back node %d's ownership "
                     "(incarnation %d) and generation %d", outage.elapsed(), config.node_rank, store.incarnation,
                     generation)
            return REJOINED
        time.sleep(min(REJOIN_PERIOD_S, outage.remaining()))
    return NONE_CAME
