"""The launchers' shared store, and the workers' store of each generation; node 0's launcher hosts both, so
no worker takes a store down by dying.

- The launchers' store listens on --master-addr:--master-port (torch.distributed.elastic's
  StaticTCPRendezvous: node 0 hosts, the others connect; node 0 waits, bounded, until every node is there).
  Its keys, under the job id, carry what the launchers must agree on: which generation runs, the port of
  its workers' store, that the job ends (and why), that the recovery controller ended it.
- A generation is one start of the whole group (the first, then each torchrun-style group restart; worker
  reboot stays inside its generation). Each generation gets a new workers' store on a free port of node 0,
  given to the workers as MASTER_ADDR:MASTER_PORT. Why not reuse one: torch's env:// rendezvous writes its
  keys (gloo's peer addresses among them) with no per-attempt prefix, so a group started again on the same
  store reads the dead processes' addresses and fails to connect (torchrun 2.13 with --max-restarts and a
  static rendezvous does exactly that). A fresh store cannot hold stale keys. Inside a generation, a
  rebooted worker meets the survivors on the same store, under a new prefix of their choosing
  (core/communication/comm's epochs).
- Node 0 lost: the other launchers keep their workers and wait (--node0-wait) for a new launcher of node 0
  to host a fresh launchers' store at the same address; they write back into it what the job needs
  (rejoin_entries), and the new node 0, finding the job running, joins it as a replacement node would.
  A standby whose host can listen at node 0's address is that new node 0, with its workers warm.
"""
from __future__ import annotations

import json
import logging
import re
import time
from datetime import timedelta
from typing import Dict, List, Optional, Tuple

from torch.distributed import DistError, PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.utils.distributed import get_free_port

from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.core.job import job_store
from mindio_adaptor.core.job.paired_store import ENV_STORES, REHOSTED_STORE_ADOPTED
from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue
from mindio_adaptor.launch import lifeline, node_liveness
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import controller_key, controllers_keys, reachable_host
from mindio_adaptor.launch.node0_loss import REJOIN_PERIOD_S, Node0Outage, can_host, store_listening

EXIT_BARRIER_S = 300.0  # torchrun's exit barrier: node 0 keeps the stores up until every node is done
POLL_S = 0.05

GENERATION = "generation"  # the generation the job is in (moved by compare-and-set)
END = "end"  # why the job ends (a node gave up, or was signalled); every launcher stops its workers
CONTROLLER_END = "controller_end"  # a worker exited ENDED_BY_CONTROLLER: nothing is restarted any more
STANDBYS, STANDBYS_LEFT = "standbys", "standbys_left"  # counters: standby launchers that joined, that left
JOB_RUNNING = "job_running"  # written by launchers that rejoined a new node 0's store: a job runs already
STANDBY_LEAVE_S = 10.0  # the least node 0 waits at the end for standbys to see it
PROBE_S = 1.0  # how long a launcher that lost node 0 waits for a connection to its address, per try
CONNECT_S = 5.0  # how long its store client may take to connect there, per try


# Counters only add() moves: unsealed (core/job/sealed_values); every other value in the store is sealed.
_COUNTER = re.compile(r"node/\d+(/beat)?")
logger = logging.getLogger("mindio_adaptor.launch")


def is_counter(key: str) -> bool:
    return key in (STANDBYS, STANDBYS_LEFT) or bool(_COUNTER.fullmatch(key))


def _report_unsealed(err: UnsealedValue) -> None:
    logger.warning("%s (someone who reached the launchers' store wrote it; nothing is done on it)", err)


def _key_done(node: int) -> str:
    return f"node/{node}/done"


def _key_drained(node: int) -> str:
    return f"node/{node}/drained"  # its launcher left the node to a standby (a hot switch of every local rank)


DRAINED_EVIDENCE = "its launcher handed it over (every local rank was switched to a standby: a drain)"


def _key_node(node: int) -> str:
    return f"node/{node}"  # counter: launchers of this node rank that joined


def _key_config(node: int) -> str:
    return f"node/{node}/config"


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
    entries = [(JOB_RUNNING, str(node), True), (GENERATION, str(generation), True),
               (node_liveness.owner_key(0), f"{node0_owner}:lost", True),
               (node_liveness.owner_key(node), owner_value, True), (_key_node(node), "1", True),
               # A node's own slot is written over whatever another launcher wrote back first: only the node
               # knows where its controller and store are now (a replaced node re-hosts them).
               *((key, value, key != controller_key(node, generation))
                 for key, value in controllers_keys(controllers, generation).items()),
               *((key, value, key != _key_store(generation, node))
                 for key, value in stores_keys(generation, stores).items())]
    if controller_ended:
        entries.append((CONTROLLER_END, str(node), False))
    return [*entries, (_key_config(node), members, False)]


class NodeStoreError(RuntimeError):
    """The launchers could not meet, or disagree (the message names the node and the problem)."""


def _key_port(generation: int) -> str:
    return f"generation/{generation}/port"


def _key_store(generation: int, node: int) -> str:
    return f"generation/{generation}/store/{node}"  # host:port of the workers' store node hosts beside its controller


def stores_keys(generation: int, env: Dict[str, str]) -> Dict[str, str]:
    """The launchers' store keys that `env` (what NodeStore.worker_stores returned) was read from."""
    if not env:
        return {}
    return {_key_store(generation, node): address for node, address in enumerate(env[ENV_STORES].split(","))}


class NodeStore:
    def __init__(self, config: LaunchConfig, token: str):
        self.config = config
        self.token = token  # the job's (launch/job_token): seals the values here, never written here
        self.store: Optional[SealedStore] = None
        self.port = config.master_port or get_free_port()  # 0 (one node): any free port, as torchrun's --standalone
        self._worker_stores: Dict[int, TCPStore] = {}  # node 0: generation -> the store it hosts
        self.incarnation = 0  # which launcher of this node rank this is (1: the first; more: replacements)
        self._beat: Optional[node_liveness.NodeBeat] = None
        self._lifeline: Optional[lifeline.Lifeline] = None
        self.lost_evidence = ""  # a replacing launcher: how it knew the node it took was lost
        self.took_drained_node = False  # the node it took was drained (its ranks handed over alive), not lost
        self._owner_value = ""  # what this launcher wrote as its node rank's owner (a rejoin writes it back)
        self._node0_owner = 1  # the incarnation of node 0 last seen running (a rejoin says it was lost)
        self._node0_lifeline: Optional[lifeline.LifelineAddress] = None  # a standby: node 0's, as last read

    @property
    def replacing(self) -> bool:
        """This launcher took the place of a lost node in a running job: its workers start as replacements."""
        return self.incarnation > 1

    @property
    def hosting(self) -> bool:
        return self.config.node_rank == 0

    def join(self) -> None:
        """Meet the other launchers (bounded by --rdzv-conf timeout), check that they agree, and own this
        node rank (taking a lost node's place in a running job)."""
        self.store = self._rendezvous(self.config.node_rank)
        self._check_members()
        if self.hosting and self._own_lost_node0("the other launchers rejoined at its address with the job running"):
            return
        self._own(self.config.node_rank, first=self.store.add(_key_node(self.config.node_rank), 1) == 1)

    def sealed(self, store: Store) -> SealedStore:
        """The launchers' store (PrefixStore of the job) with its values sealed under the job's token."""
        return SealedStore(store, self.token, self.config.run_id, is_counter, _report_unsealed)

    def _rendezvous(self, rank: int) -> SealedStore:
        cfg = self.config
        rendezvous = StaticTCPRendezvous(cfg.master_addr, self.port, rank, cfg.nnodes, cfg.run_id,
                                         max(1, round(cfg.rdzv_timeout)))  # whole seconds there
        try:
            return self.sealed(rendezvous.next_rendezvous().store)
        except (RuntimeError, TimeoutError) as err:
            where = "host" if rank == 0 else "reach node 0's"
            raise NodeStoreError(f"could not {where} launchers' store at {cfg.master_addr}:{self.port} with all "
                                 f"{cfg.nnodes} nodes within {cfg.rdzv_timeout:.0f} s: {err}") from None

    def _own(self, node: int, first: bool, lost_owner: Optional[int] = None) -> None:
        """Own `node`: the first launcher of it, or one that takes it from a lost owner (`lost_owner`: the
        owner a watch already judged lost, else this judges it: its lifeline refused, or its beat silent for
        --node-lost-after)."""
        cfg, store = self.config, self.store
        seen = node_liveness.owner_or_none(store, node) if lost_owner is None else lost_owner
        if not first and lost_owner is None and not self._judged_lost(node, seen):
            raise NodeStoreError(f"node rank {node} is held by a running launcher (its beat moved within "
                                 f"{cfg.node_lost_after:g} s); a launcher takes a node rank only from a lost node")
        if not first and not cfg.worker_reboot:
            raise NodeStoreError(f"node rank {node} was lost and this launcher would replace it in the running "
                                 f"job, which needs worker reboot (--worker-reboot, or the script's "
                                 f"--enable-worker-reboot): its workers must replace the lost ranks")
        incarnation = node_liveness.take_over(store, node, seen)
        if incarnation is None:
            raise NodeStoreError(f"another launcher took node rank {node}'s place first")
        self.incarnation = incarnation
        # A node whose launcher ended while the job went on (its workers left it, elastic training) is in the
        # job again: node 0's exit barrier waits for this launcher, not the last one's "done".
        store.delete_key(_key_done(node))
        store.delete_key(_key_drained(node))  # said once: a later loss of this node is a loss
        self._owner_value = store.get(node_liveness.owner_key(node)).decode()
        self._beat = node_liveness.NodeBeat(cfg.master_addr, self.port, cfg.run_id, node, cfg.node_lost_after)
        self._beat.start()
        self._lifeline = lifeline.Lifeline(reachable_host(cfg))
        self._lifeline.publish(store, node, incarnation)

    def _judged_lost(self, node: int, owner: int) -> bool:
        """Whether the launcher owning `node` is gone: at once when its lifeline's port refuses connections,
        else when its beat stays still for --node-lost-after."""
        address = lifeline.published(self.store, node)
        if address is not None and address.incarnation == owner and lifeline.refused(address):
            self.lost_evidence = lifeline.EVIDENCE
            return True
        self.lost_evidence = self._silence()
        return bool(node_liveness.lost_nodes(self.store, [node], self.config.node_lost_after))

    def join_as_standby(self, log) -> Optional[int]:
        """A standby launcher: wait for a node to be lost and take its rank; the node rank taken, or None when
        the job ended without needing this one. When node 0 itself is lost, it takes node 0's place where its
        host can listen at node 0's address, else it follows the store a new node 0 hosts there (with worker
        reboot, as the nodes do)."""
        cfg = self.config
        self.store = self._rendezvous(rank=cfg.nnodes)  # any rank but 0: a client of node 0's store
        while True:
            self.store.add(STANDBYS, 1)  # again in a new node 0's store, which has not counted this one
            try:
                node = self._wait_for_a_lost_node(log)
            except DistError as err:
                if self._standby_follows_new_node0(err, log):
                    return 0
                continue
            self.store.add(STANDBYS_LEFT, 1)  # as a node now, or not needed: node 0 need not wait for it
            return node

    def _standby_follows_new_node0(self, err: DistError, log) -> bool:
        """Node 0 was lost while this standby waited: take its place (True) when its launcher's process is
        proven gone and this host can listen at its address, or else wait up to --node0-wait for a new node 0
        there and watch the nodes again in its store (False); raises NodeStoreError when none comes. (A
        standby always has worker reboot, under which the nodes wait too.)"""
        cfg = self.config
        where = f"{cfg.master_addr}:{self.port}"
        outage = Node0Outage(cfg.node0_wait)
        unproven = "" if self._node0_lifeline else " (node 0 was lost before this standby read its lifeline: no proof)"
        log.info("standby: lost the launchers' store at %s (node 0's launcher) at %s: %s; waiting up to %g s "
                 "(--node0-wait) for a new node 0 at that address, or to be it%s", where, outage.started_at(), err,
                 cfg.node0_wait, unproven)
        while not outage.over():
            if self._node0_gone_and_hostable_here() and self._take_node0(log):
                return True
            store = self._client_of_new_node0()
            if store is not None:
                self.store = store
                log.info("standby: joined the launchers' store of a new node 0 after %.1f s", outage.elapsed())
                return False
            time.sleep(min(REJOIN_PERIOD_S, outage.remaining()))
        raise NodeStoreError(f"lost the launchers' store on node 0 ({where}) and no new node 0 came within "
                             f"{cfg.node0_wait:g} s (--node0-wait)")

    def _node0_gone_and_hostable_here(self) -> bool:
        """Node 0's launcher is proven gone (its lifeline refuses connections) and this host may listen at its
        address. A stalled node 0 keeps both its lifeline and the store's port: never taken."""
        address = self._node0_lifeline
        return (address is not None and lifeline.refused(address)
                and can_host(self.config.master_addr, self.port))

    def _take_node0(self, log) -> bool:
        """Host the launchers' store at node 0's address and take node 0's place as a new node 0 would (the
        others rejoin it); False when another launcher started hosting there first."""
        cfg = self.config
        log.info("standby: node 0's launcher is gone (%s) and this host can listen at its address %s:%d: this "
                 "standby takes node 0's place, hosting the launchers' store", lifeline.EVIDENCE, cfg.master_addr,
                 self.port)
        try:
            self.store = self._rendezvous(0)
        except NodeStoreError as err:
            log.info("standby: could not host the launchers' store (%s); following the one hosted there", err)
            return False
        cfg.node_rank = 0
        self._check_members()
        if not self._own_lost_node0(lifeline.EVIDENCE):
            raise NodeStoreError("hosted the launchers' store at node 0's address, but no launcher rejoined it "
                                 "with the job running")
        return True

    def _own_lost_node0(self, evidence: str) -> bool:
        """Node 0's place in the running job, for a launcher hosting the store the others rejoined (they wrote
        that the job runs); False when none did: no job is running, this is a first start."""
        if not self.store.check([JOB_RUNNING]):
            return False
        self.lost_evidence = evidence
        self._own(0, first=False, lost_owner=node_liveness.owner_or_none(self.store, 0))
        return True

    def _client_of_new_node0(self) -> Optional[SealedStore]:
        """A client of the store a new node 0 hosts at node 0's address, or None while nothing listens there
        (or it went away again)."""
        cfg = self.config
        if not store_listening(cfg.master_addr, self.port, timeout=PROBE_S):
            return None
        try:
            # A client of the rendezvous' kind: it counts as one node among those the new node 0 waits for. Its
            # connection gets CONNECT_S, not the rendezvous timeout: the probe may have reached node 0's store as it
            # died, and torch's client retries a reset connection until its timeout, while this launcher must
            # go back to its loop (a standby that may host the store itself, a node 0 that comes later).
            client = TCPStore(cfg.master_addr, self.port, cfg.nnodes, False, timedelta(seconds=CONNECT_S),
                              multi_tenant=True)
        except DistError:
            return None
        client.set_timeout(timedelta(seconds=cfg.rdzv_timeout))  # the store's operations wait as long as before
        return self.sealed(PrefixStore(cfg.run_id, client))

    def _wait_for_a_lost_node(self, log) -> Optional[int]:
        """One watch of the beats for as long as this waits: a node is taken `--node-lost-after` seconds
        after its last beat, not after a window that began while it still beat."""
        cfg = self.config
        nodes = range(1, cfg.nnodes)
        self._node0_lifeline = None  # read once node 0 published it: its loss shows as the store's
        watch, lifelines = node_liveness.BeatWatch(self.store, nodes), lifeline.LifelineWatch(self.store, nodes)
        try:
            while not self._job_over():
                if self._node0_lifeline is None:
                    self._node0_lifeline = lifeline.published(self.store, 0)
                    if self._node0_lifeline is not None:
                        self._say_watching(log, nodes)
                gone = lifelines.gone()
                silent = {node: watch.owner_at_last_beat(node) for node in watch.lost(cfg.node_lost_after)}
                for node, lost_owner in {**silent, **gone}.items():
                    if not lost_owner or self.store.check([_key_done(node)]):
                        continue  # not started yet, or it ended its part of the job: nothing to take over
                    self.took_drained_node = self.store.check([_key_drained(node)])
                    self.lost_evidence = (DRAINED_EVIDENCE if self.took_drained_node else
                                          lifeline.EVIDENCE if node in gone else self._silence())
                    try:
                        self._own(node, first=False, lost_owner=lost_owner)
                    except NodeStoreError as err:
                        log.info("standby: node %d: %s", node, err)
                        continue
                    self.config.node_rank = node
                    return node
                time.sleep(POLL_S)
            return None
        finally:
            lifelines.close()

    def _say_watching(self, log, nodes: range) -> None:
        """Said once node 0's lifeline is known: before it, node 0's loss could not be proven (a loss then
        is followed, never taken), so an operator or a test that waits for this line can count on both."""
        log.info("standby: watching nodes %s and node 0 (its lifeline at %s:%d); a node is taken over when its "
                 "launcher's process is gone or its beat was silent for %g s", list(nodes),
                 self._node0_lifeline.host, self._node0_lifeline.port, self.config.node_lost_after)

    def standby_waiting(self) -> bool:
        """A standby launcher watches the nodes now, ready to take a lost one's place."""
        return self.store.add(STANDBYS_LEFT, 0) < self.store.add(STANDBYS, 0)

    def node_done(self, node: int) -> bool:
        """`node`'s launcher ended its part of the job (its workers finished or left it)."""
        return self.store.check([_key_done(node)])

    def _silence(self) -> str:
        return f"its beat was silent for {self.config.node_lost_after:g} s"

    def _job_over(self) -> bool:
        nodes = range(self.config.nnodes)
        return (self.end_reason() is not None or self.controller_ended()
                or self.store.check([_key_done(node) for node in nodes]))

    def still_owner(self) -> bool:
        """False once another launcher took this node rank (this one was silent too long). An unsealed owner
        is a stranger's write: no launcher took the node, and this one owns it still."""
        try:
            return node_liveness.owner(self.store, self.config.node_rank) == self.incarnation
        except UnsealedValue:
            return True

    def _check_members(self) -> None:
        """One launcher per node rank, and the same number of workers on each (ranks are node-major)."""
        cfg, store = self.config, self.store
        mine = self._members()
        store.set(_key_config(cfg.node_rank), json.dumps(mine))
        for node in range(cfg.nnodes):
            store.wait([_key_config(node)], timedelta(seconds=cfg.rdzv_timeout))
            theirs = json.loads(store.get(_key_config(node)))
            if theirs != mine:
                raise NodeStoreError(f"node {node} was started with {theirs}, this node with {mine}; every "
                                     f"launcher needs the same --nnodes and --nproc-per-node")
        # After every config: launchers that rejoin a new node 0 write the generation before theirs.
        store.compare_set(GENERATION, "", "0")

    def _members(self) -> Dict[str, int]:
        return {"nproc_per_node": self.config.nproc_per_node, "nnodes": self.config.nnodes}

    def note_node0_owner(self) -> None:
        """Remember which launcher of node 0 runs: a rejoin tells the next node 0 whose place it takes."""
        self._node0_owner = node_liveness.owner_or_none(self.store, 0) or self._node0_owner

    def rejoin(self, generation: int, controller_ended: bool, controllers: Dict[str, str],
               stores: Optional[Dict[str, str]] = None) -> bool:
        """Connect to the store a new node 0 hosts at node 0's address and write back what it must know
        (rejoin_entries); False while nothing listens there, or when it went away again."""
        store = self._client_of_new_node0()
        if store is None:
            return False
        entries = rejoin_entries(self.config.node_rank, json.dumps(self._members()), self._owner_value,
                                 generation, self._node0_owner, controller_ended, controllers, stores)
        try:
            for key, value, keep_existing in entries:
                if keep_existing:
                    store.compare_set(key, "", value)
                else:
                    store.set(key, value)
            # One beat now: a standby's watch of this node starts from it, and this node's beat thread,
            # which finds the new store on its own, then only has to keep it moving.
            store.add(node_liveness.beat_key(self.config.node_rank), 1)
            if self._lifeline is not None:
                self._lifeline.publish(store, self.config.node_rank, self.incarnation)
        except DistError:
            return False
        self.store = store
        return True

    def generation(self) -> int:
        """The generation in force (a stranger's value under its key is ignored: the last sealed one stands)."""
        return int(self.store.get(GENERATION)) if self.store.check([GENERATION]) else 0

    def request_restart(self, current: int) -> int:
        """Move the job from generation `current` to the next; returns the generation now in force (someone
        else may have moved it first: several nodes seeing the same failure restart once)."""
        return int(self.store.compare_set(GENERATION, str(current), str(current + 1)))

    def open_generation(self, generation: int) -> int:
        """The workers' store port of `generation`: node 0 hosts a new store, the others wait for its port."""
        key = _key_port(generation)
        if self.hosting:
            store = host_store(port=0)
            self._worker_stores = {generation: store}  # the previous generation's workers are all stopped
            self.store.set(key, str(store.port))
            port = store.port
        else:
            self.store.wait([key], timedelta(seconds=self.config.rdzv_timeout))
            port = int(self.store.get(key))
        self._publish_worker_store(generation)
        return port

    def _publish_worker_store(self, generation: int) -> None:
        """Nodes below --controllers: a workers' store beside the controller, so that no store the workers
        need lives only on node 0 (node 0's is the one at MASTER_PORT). Per generation, as node 0's: a
        fresh store cannot hold a previous generation's keys."""
        cfg = self.config
        key = _key_store(generation, cfg.node_rank)
        if cfg.node_rank >= cfg.controllers:
            return
        if not self.hosting:
            self._worker_stores = {generation: host_store(port=0)}
        address = f"{reachable_host(cfg)}:{self._worker_stores[generation].port}"
        if self.replacing:  # the lost node's slot, hosted again (core/job/rehosted_slot): the new store replaces it
            self.store.set(key, address)
        else:
            self.store.compare_set(key, "", address)

    def generation_port(self, generation: int) -> Optional[int]:
        """The port of `generation`'s workers' store on node 0 as published now (a new node 0 hosts a new
        one), or None while none is."""
        key = _key_port(generation)
        return int(self.store.get(key)) if self.store.check([key]) else None

    def rehosted_store_adopted(self, generation: int) -> bool:
        """Whether the members adopted the workers' store this node hosts for `generation` as a re-hosted
        slot's (core/job/rehosted_slot marks it once the job's facts are copied there)."""
        store = self._worker_stores.get(generation)
        return store is not None and job_store.sealed(store, self.token).check([job_store.PREFIX + REHOSTED_STORE_ADOPTED])

    def worker_stores(self, generation: int) -> Dict[str, str]:
        """What every worker gets with --controllers: the workers' stores of `generation` in node order,
        parallel to the controllers' list (waits, bounded by the rendezvous timeout, for every hosting node)."""
        cfg = self.config
        if not cfg.controllers:
            return {}
        keys = [_key_store(generation, node) for node in range(cfg.controllers)]
        self.store.wait(keys, timedelta(seconds=cfg.rdzv_timeout))
        return {ENV_STORES: ",".join(self.store.get(key).decode() for key in keys)}

    def end(self, reason: str) -> None:
        self.store.set(END, reason)

    def end_reason(self) -> Optional[str]:
        return self.store.get(END).decode() if self.store.check([END]) else None

    def mark_controller_end(self) -> None:
        self.store.set(CONTROLLER_END, str(self.config.node_rank))

    def controller_ended(self) -> bool:
        return self.store.check([CONTROLLER_END])

    def stop_beat(self) -> None:
        """Stop beating for this node (at the latest before the launcher exits: see NodeBeat)."""
        if self._beat is not None:
            self._beat.stop()

    def drain(self) -> None:
        """This node's place goes to a standby launcher (every local rank was handed over): the beat stops and
        the lifeline closes with no goodbye, so a watching standby takes the place as a lost node's; the node
        is not said done."""
        self.stop_beat()
        self.store.set(_key_drained(self.config.node_rank), "1")
        if self._lifeline is not None:
            self._lifeline.hand_over()

    def leave(self, timeout: float = EXIT_BARRIER_S, wait_for_all: bool = False) -> bool:
        """Say this node is done; node 0 (and, with `wait_for_all`, this node) then waits until every node
        said so or is lost (bounded): node 0 keeps the stores up meanwhile. Returns False when it stopped
        waiting before that."""
        self.stop_beat()
        if self.store is None:
            return True
        try:
            self.store.set(_key_done(self.config.node_rank), "1")
        finally:  # after "done": a watcher that took this end for a loss reads that before it acts
            if self._lifeline is not None:
                self._lifeline.leave()
        if not (self.hosting or wait_for_all):
            return True
        deadline = time.monotonic() + timeout
        watch = node_liveness.BeatWatch(self.store, range(self.config.nnodes))
        while time.monotonic() < deadline:
            pending = [node for node in range(self.config.nnodes) if not self.store.check([_key_done(node)])]
            if not pending or set(pending) <= set(watch.lost(self.config.node_lost_after)):
                return self._standbys_left(deadline) if self.hosting else True
            time.sleep(POLL_S)
        return False

    def _standbys_left(self, deadline: float) -> bool:
        """Standbys that were not needed see the job end before node 0 takes the store down (a killed one
        never says so: bounded by --node-lost-after, and by STANDBY_LEAVE_S at least: a standby on a busy
        host may need seconds to see the end, and one that finds the store gone waits for a new node 0)."""
        deadline = min(deadline, time.monotonic() + max(self.config.node_lost_after, STANDBY_LEAVE_S))
        while self.store.add(STANDBYS_LEFT, 0) < self.store.add(STANDBYS, 0):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True
