"""Node 0's loss, all of it: how long a launcher waits for a new node 0, how it sees one come, what it writes
back there, and how a standby takes node 0's place.

Node 0's launcher hosts the launchers' store. When it dies, the other launchers keep their workers and
try the same address again, for at most `--node0-wait` seconds (`answer_lost_store`): a new launcher started
with `--node-rank 0` (a rescheduled pod keeps its index and DNS name) hosts a fresh store there, and the
survivors write back into it what the job needs (`rejoin_entries`, `Node0Loss.rejoin`). Past the wait, a
launcher ends as it did before this existed: it stops its workers and exits 1 naming the lost store.
A standby takes node 0's place itself, warm, where node 0's launcher is proven gone and node 0's address can
be hosted on its host (a floating address moved to it, or the same host): `can_host`, `Node0Loss.standby_follows`.
"""
from __future__ import annotations

import json
import signal
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Dict, List, Optional, Tuple

from torch.distributed import DistError, PrefixStore, TCPStore

from mindio_adaptor.core.job.sealed_values import SealedStore
from mindio_adaptor.launch import lifeline, node_liveness, store_keys
from mindio_adaptor.launch.controllers import controller_key, controllers_keys
from mindio_adaptor.launch.node_liveness import store_listening
from mindio_adaptor.launch.policy import Outcome
from mindio_adaptor.launch.store_keys import NodeStoreError

REJOIN_PERIOD_S = 0.5  # between tries at node 0's address after it was lost
PROBE_S = 1.0  # how long a launcher that lost node 0 waits for a connection to its address, per try
CONNECT_S = 5.0  # how long its store client may take to connect there, per try
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


def answer_lost_store(agent, err: DistError) -> Optional[Outcome]:
    """Node 0's launcher is gone with the launchers' store: `agent` (launch/agent.NodeAgent) keeps its workers
    running and rejoins the store a new node 0 hosts at the same address. Only with worker reboot: without it a
    new node 0's workers could not join the running job. None once rejoined, else how the launcher ends."""
    if agent.workers.all_exited_0():
        return _finished_without_node0(agent)
    if agent.store.hosting or not agent.config.worker_reboot:
        raise err
    waited = wait_for_new_node0(agent.config, agent.store, err, agent.log, agent.starts.lists, agent.generation,
                                agent.ended, lambda: agent.signalled is not None, agent.workers.all_exited_0)
    if waited == SIGNALLED:
        return agent.check_signal()
    if waited == WORKERS_DONE:
        return _finished_without_node0(agent)
    if waited == REJOINED:
        return None
    cfg = agent.config
    agent.stop(signal.SIGTERM, "node 0 lost")
    return Outcome(1, f"lost the launchers' store on node 0 ({cfg.master_addr}:{agent.store.port}) and no new "
                      f"node 0 came within {cfg.node0_wait:g} s (--node0-wait)")


def _finished_without_node0(agent) -> Outcome:
    """Every local worker exited 0: nothing to keep running, and node 0 may just have ended first (its end
    barrier took this node, slow to say it was done, for lost). An exit 0 needs no store."""
    agent.log.info("the launchers' store on node 0 is gone, and every local worker exited 0: finishing")
    agent.exits.check()
    return agent.workers.finished(agent.ended)


def wait_for_new_node0(config, store, err, log, lists, generation: int, ended: bool, signalled: Callable[[], bool],
                       workers_done: Callable[[], bool]) -> str:
    """A launcher whose workers keep running rejoins the store a new node 0 hosts at node 0's address
    (Node0Loss.rejoin writes back what the job needs from `lists`, launch/membership.KnownLists), for at most
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
        if store.node0.rejoin(generation, ended, lists.controllers, lists.stores):
            log.info("rejoined the launchers' store of a new node 0 after %.1f s: wrote back node %d's ownership "
                     "(incarnation %d) and generation %d", outage.elapsed(), config.node_rank, store.ownership.incarnation,
                     generation)
            return REJOINED
        time.sleep(min(REJOIN_PERIOD_S, outage.remaining()))
    return NONE_CAME


def rejoin_entries(node: int, members: str, owner_value: str, generation: int, node0_owner: int,
                   controller_ended: bool, controllers: Dict[str, str],
                   stores: Optional[Dict[str, str]] = None) -> List[Tuple[str, str, bool]]:
    """What a launcher that lost node 0 writes into the new node 0's store, in order, as (key, value,
    keep_existing): keep_existing entries are written only where no other launcher wrote one first (a
    compare-and-set from nothing). The owners come back as they were, so fencing still holds: a launcher
    whose rank another took meanwhile finds it so. Node 0's owner comes back marked lost, for the new node 0
    to take over from. The workers' stores of the generation come back as the workers know them, node 0's
    lost one included: the new node 0's workers then get the survivors' list, and read the job's facts
    from the first store of it that answers (core/job/paired_store). The node's config comes last: the new
    node 0 reads every node's config and then looks for JOB_RUNNING, which is therefore there by then."""
    entries = [(store_keys.JOB_RUNNING, str(node), True), (store_keys.GENERATION, str(generation), True),
               (node_liveness.owner_key(0), f"{node0_owner}:lost", True),
               (node_liveness.owner_key(node), owner_value, True), (store_keys.node(node), "1", True),
               # A node's own slot is written over whatever another launcher wrote back first: only the node
               # knows where its controller and store are now (a replaced node re-hosts them).
               *((key, value, key != controller_key(node, generation))
                 for key, value in controllers_keys(controllers, generation).items()),
               *((key, value, key != store_keys.store(generation, node))
                 for key, value in store_keys.stores_keys(generation, stores).items())]
    if controller_ended:
        entries.append((store_keys.CONTROLLER_END, str(node), False))
    return [*entries, (store_keys.config(node), members, False)]


class Node0Loss:
    """One launcher's side of node 0's loss, over its launchers' store (launch/node_store.NodeStore): the new
    node 0's store it rejoins, what it writes back there, and for a standby, node 0's place itself."""

    def __init__(self, nodes):
        self.nodes = nodes  # the NodeStore: the launchers' store, and this launcher's ownership of its node
        self.owner = 1  # the incarnation of node 0 last seen running (a rejoin says it was lost)
        self.lifeline: Optional[lifeline.LifelineAddress] = None  # a standby: node 0's, as last read

    def standby_follows(self, err: DistError, log) -> bool:
        """Node 0 was lost while this standby waited: take its place (True) when its launcher's process is
        proven gone and this host can listen at its address, or else wait up to --node0-wait for a new node 0
        there and watch the nodes again in its store (False); raises NodeStoreError when none comes. (A
        standby always has worker reboot, under which the nodes wait too.)"""
        cfg = self.nodes.config
        where = f"{cfg.master_addr}:{self.nodes.port}"
        outage = Node0Outage(cfg.node0_wait)
        unproven = "" if self.lifeline else " (node 0 was lost before this standby read its lifeline: no proof)"
        log.info("standby: lost the launchers' store at %s (node 0's launcher) at %s: %s; waiting up to %g s "
                 "(--node0-wait) for a new node 0 at that address, or to be it%s", where, outage.started_at(), err,
                 cfg.node0_wait, unproven)
        while not outage.over():
            if self._gone_and_hostable_here() and self._take(log):
                return True
            store = self.client_of_new_node0()
            if store is not None:
                self.nodes.store = store
                log.info("standby: joined the launchers' store of a new node 0 after %.1f s", outage.elapsed())
                return False
            time.sleep(min(REJOIN_PERIOD_S, outage.remaining()))
        raise NodeStoreError(f"lost the launchers' store on node 0 ({where}) and no new node 0 came within "
                             f"{cfg.node0_wait:g} s (--node0-wait)")

    def _gone_and_hostable_here(self) -> bool:
        """Node 0's launcher is proven gone (its lifeline refuses connections) and this host may listen at its
        address. A stalled node 0 keeps both its lifeline and the store's port: never taken."""
        address = self.lifeline
        return (address is not None and lifeline.refused(address)
                and can_host(self.nodes.config.master_addr, self.nodes.port))

    def _take(self, log) -> bool:
        """Host the launchers' store at node 0's address and take node 0's place as a new node 0 would (the
        others rejoin it); False when another launcher started hosting there first."""
        cfg = self.nodes.config
        log.info("standby: node 0's launcher is gone (%s) and this host can listen at its address %s:%d: this "
                 "standby takes node 0's place, hosting the launchers' store", lifeline.EVIDENCE, cfg.master_addr,
                 self.nodes.port)
        try:
            self.nodes.store = self.nodes.rendezvous(0)
        except NodeStoreError as err:
            log.info("standby: could not host the launchers' store (%s); following the one hosted there", err)
            return False
        cfg.node_rank = 0
        self.nodes.check_members()
        if not self.own_if_lost(lifeline.EVIDENCE):
            raise NodeStoreError("hosted the launchers' store at node 0's address, but no launcher rejoined it "
                                 "with the job running")
        return True

    def own_if_lost(self, evidence: str) -> bool:
        """Node 0's place in the running job, for a launcher hosting the store the others rejoined (they wrote
        that the job runs); False when none did: no job is running, this is a first start."""
        if not self.nodes.store.check([store_keys.JOB_RUNNING]):
            return False
        self.nodes.ownership.lost_evidence = evidence
        self.nodes.ownership.own(0, first=False, lost_owner=node_liveness.owner_or_none(self.nodes.store, 0))
        return True

    def client_of_new_node0(self) -> Optional[SealedStore]:
        """A client of the store a new node 0 hosts at node 0's address, or None while nothing listens there
        (or it went away again)."""
        cfg = self.nodes.config
        if not store_listening(cfg.master_addr, self.nodes.port, timeout=PROBE_S):
            return None
        try:
            # A client of the rendezvous' kind: it counts as one node among those the new node 0 waits for. Its
            # connection gets CONNECT_S, not the rendezvous timeout: the probe may have reached node 0's store as it
            # died, and torch's client retries a reset connection until its timeout, while this launcher must
            # go back to its loop (a standby that may host the store itself, a node 0 that comes later).
            client = TCPStore(cfg.master_addr, self.nodes.port, cfg.nnodes, False, timedelta(seconds=CONNECT_S),
                              multi_tenant=True)
        except DistError:
            return None
        client.set_timeout(timedelta(seconds=cfg.rdzv_timeout))  # the store's operations wait as long as before
        return self.nodes.sealed(PrefixStore(cfg.run_id, client))

    def note_owner(self) -> None:
        """Remember which launcher of node 0 runs: a rejoin tells the next node 0 whose place it takes."""
        self.owner = node_liveness.owner_or_none(self.nodes.store, 0) or self.owner

    def rejoin(self, generation: int, controller_ended: bool, controllers: Dict[str, str],
               stores: Optional[Dict[str, str]] = None) -> bool:
        """Connect to the store a new node 0 hosts at node 0's address and write back what it must know
        (rejoin_entries); False while nothing listens there, or when it went away again."""
        store = self.client_of_new_node0()
        if store is None:
            return False
        nodes = self.nodes
        entries = rejoin_entries(nodes.config.node_rank, json.dumps(nodes.members()), nodes.ownership.owner_value, generation,
                                 self.owner, controller_ended, controllers, stores)
        try:
            for key, value, keep_existing in entries:
                if keep_existing:
                    store.compare_set(key, "", value)
                else:
                    store.set(key, value)
            nodes.ownership.publish_in(store)
        except DistError:
            return False
        self.nodes.store = store
        return True
