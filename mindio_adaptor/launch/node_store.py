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
  to host a fresh launchers' store at the same address; they write back into it what the job needs, and the
  new node 0, finding the job running, joins it as a replacement node would. A standby whose host can listen
  at node 0's address is that new node 0, with its workers warm (all of it: launch/node0_loss).
"""
from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Dict, Optional

from torch.distributed import DistError, Store, TCPStore
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.utils.distributed import get_free_port

from mindio_adaptor.core.communication.comm import host_store
from mindio_adaptor.core.job import job_store
from mindio_adaptor.core.job.paired_store import ENV_STORES, REHOSTED_STORE_ADOPTED
from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue
from mindio_adaptor.launch import lifeline, node_liveness, store_keys
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.controllers import reachable_host
from mindio_adaptor.launch.node0_loss import Node0Loss
from mindio_adaptor.launch.node_ownership import NodeOwnership
from mindio_adaptor.launch.store_keys import NodeStoreError

EXIT_BARRIER_S = 300.0  # torchrun's exit barrier: node 0 keeps the stores up until every node is done
POLL_S = 0.05
STANDBY_LEAVE_S = 10.0  # the least node 0 waits at the end for standbys to see it
logger = logging.getLogger("mindio_adaptor.launch")


def _report_unsealed(err: UnsealedValue) -> None:
    logger.warning("%s (someone who reached the launchers' store wrote it; nothing is done on it)", err)


class NodeStore:
    def __init__(self, config: LaunchConfig, token: str):
        self.config = config
        self.token = token  # the job's (launch/job_token): seals the values here, never written here
        self.store: Optional[SealedStore] = None
        self.port = config.master_port or get_free_port()  # 0 (one node): any free port, as torchrun's --standalone
        self._worker_stores: Dict[int, TCPStore] = {}  # node 0: generation -> the store it hosts
        self.ownership = NodeOwnership(self)  # this launcher's node rank, and how it took it (launch/node_ownership)
        self.node0 = Node0Loss(self)  # node 0's loss seen from this launcher (launch/node0_loss)

    @property
    def hosting(self) -> bool:
        return self.config.node_rank == 0

    def join(self) -> None:
        """Meet the other launchers (bounded by --rdzv-conf timeout), check that they agree, and own this
        node rank (taking a lost node's place in a running job)."""
        self.store = self.rendezvous(self.config.node_rank)
        self.check_members()
        if self.hosting and self.node0.own_if_lost("the other launchers rejoined at its address with the job running"):
            return
        self.ownership.own(self.config.node_rank, first=self.store.add(store_keys.node(self.config.node_rank), 1) == 1)

    def sealed(self, store: Store) -> SealedStore:
        """The launchers' store (PrefixStore of the job) with its values sealed under the job's token."""
        return SealedStore(store, self.token, self.config.run_id, store_keys.is_counter, _report_unsealed)

    def rendezvous(self, rank: int) -> SealedStore:
        cfg = self.config
        rendezvous = StaticTCPRendezvous(cfg.master_addr, self.port, rank, cfg.nnodes, cfg.run_id,
                                         max(1, round(cfg.rdzv_timeout)))  # whole seconds there
        try:
            return self.sealed(rendezvous.next_rendezvous().store)
        except (RuntimeError, TimeoutError) as err:
            where = "host" if rank == 0 else "reach node 0's"
            raise NodeStoreError(f"could not {where} launchers' store at {cfg.master_addr}:{self.port} with all "
                                 f"{cfg.nnodes} nodes within {cfg.rdzv_timeout:.0f} s: {err}") from None

    def join_as_standby(self, log) -> Optional[int]:
        """A standby launcher: wait for a node to be lost and take its rank; the node rank taken, or None when
        the job ended without needing this one. When node 0 itself is lost, it takes node 0's place where its
        host can listen at node 0's address, else it follows the store a new node 0 hosts there (with worker
        reboot, as the nodes do)."""
        cfg = self.config
        self.store = self.rendezvous(rank=cfg.nnodes)  # any rank but 0: a client of node 0's store
        while True:
            self.store.add(store_keys.STANDBYS, 1)  # again in a new node 0's store, which has not counted this one
            try:
                node = self._wait_for_a_lost_node(log)
            except DistError as err:
                if self.node0.standby_follows(err, log):
                    return 0
                continue
            self.store.add(store_keys.STANDBYS_LEFT, 1)  # as a node now, or not needed: node 0 need not wait for it
            return node

    def _wait_for_a_lost_node(self, log) -> Optional[int]:
        """One watch of the beats for as long as this waits: a node is taken `--node-lost-after` seconds
        after its last beat, not after a window that began while it still beat."""
        cfg = self.config
        nodes = range(1, cfg.nnodes)
        self.node0.lifeline = None  # read once node 0 published it: its loss shows as the store's
        watch, lifelines = node_liveness.BeatWatch(self.store, nodes), lifeline.LifelineWatch(self.store, nodes)
        try:
            while not self._job_over():
                if self.node0.lifeline is None:
                    self.node0.lifeline = lifeline.published(self.store, 0)
                    if self.node0.lifeline is not None:
                        self._say_watching(log, nodes)
                gone = lifelines.gone()
                silent = {node: watch.owner_at_last_beat(node) for node in watch.lost(cfg.node_lost_after)}
                for node, lost_owner in {**silent, **gone}.items():
                    if not lost_owner or self.store.check([store_keys.done(node)]):
                        continue  # not started yet, or it ended its part of the job: nothing to take over
                    try:
                        self.ownership.take_lost(node, lost_owner, gone=node in gone)
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
                 self.node0.lifeline.host, self.node0.lifeline.port, self.config.node_lost_after)

    def standby_waiting(self) -> bool:
        """A standby launcher watches the nodes now, ready to take a lost one's place."""
        return self.store.add(store_keys.STANDBYS_LEFT, 0) < self.store.add(store_keys.STANDBYS, 0)

    def node_done(self, node: int) -> bool:
        """`node`'s launcher ended its part of the job (its workers finished or left it)."""
        return self.store.check([store_keys.done(node)])

    def _job_over(self) -> bool:
        nodes = range(self.config.nnodes)
        return (self.end_reason() is not None or self.controller_ended()
                or self.store.check([store_keys.done(node) for node in nodes]))

    def check_members(self) -> None:
        """One launcher per node rank, and the same number of workers on each (ranks are node-major)."""
        cfg, store = self.config, self.store
        mine = self.members()
        store.set(store_keys.config(cfg.node_rank), json.dumps(mine))
        for node in range(cfg.nnodes):
            store.wait([store_keys.config(node)], timedelta(seconds=cfg.rdzv_timeout))
            theirs = json.loads(store.get(store_keys.config(node)))
            if theirs != mine:
                raise NodeStoreError(f"node {node} was started with {theirs}, this node with {mine}; every "
                                     f"launcher needs the same --nnodes and --nproc-per-node")
        # After every config: launchers that rejoin a new node 0 write the generation before theirs.
        store.compare_set(store_keys.GENERATION, "", "0")

    def members(self) -> Dict[str, int]:
        return {"nproc_per_node": self.config.nproc_per_node, "nnodes": self.config.nnodes}

    def generation(self) -> int:
        """The generation in force (a stranger's value under its key is ignored: the last sealed one stands)."""
        return int(self.store.get(store_keys.GENERATION)) if self.store.check([store_keys.GENERATION]) else 0

    def request_restart(self, current: int) -> int:
        """Move the job from generation `current` to the next; returns the generation now in force (someone
        else may have moved it first: several nodes seeing the same failure restart once)."""
        return int(self.store.compare_set(store_keys.GENERATION, str(current), str(current + 1)))

    def open_generation(self, generation: int) -> int:
        """The workers' store port of `generation`: node 0 hosts a new store, the others wait for its port."""
        key = store_keys.port(generation)
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
        key = store_keys.store(generation, cfg.node_rank)
        if cfg.node_rank >= cfg.controllers:
            return
        if not self.hosting:
            self._worker_stores = {generation: host_store(port=0)}
        address = f"{reachable_host(cfg)}:{self._worker_stores[generation].port}"
        if self.ownership.replacing:  # the lost node's slot, hosted again (core/job/rehosted_slot): the new store replaces it
            self.store.set(key, address)
        else:
            self.store.compare_set(key, "", address)

    def generation_port(self, generation: int) -> Optional[int]:
        """The port of `generation`'s workers' store on node 0 as published now (a new node 0 hosts a new
        one), or None while none is."""
        key = store_keys.port(generation)
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
        keys = [store_keys.store(generation, node) for node in range(cfg.controllers)]
        self.store.wait(keys, timedelta(seconds=cfg.rdzv_timeout))
        return {ENV_STORES: ",".join(self.store.get(key).decode() for key in keys)}

    def end(self, reason: str) -> None:
        self.store.set(store_keys.END, reason)

    def end_reason(self) -> Optional[str]:
        return self.store.get(store_keys.END).decode() if self.store.check([store_keys.END]) else None

    def mark_controller_end(self) -> None:
        self.store.set(store_keys.CONTROLLER_END, str(self.config.node_rank))

    def controller_ended(self) -> bool:
        return self.store.check([store_keys.CONTROLLER_END])

    def drain(self) -> None:
        """This node's place goes to a standby launcher (every local rank was handed over): the beat stops and
        the lifeline closes with no goodbye, so a watching standby takes the place as a lost node's; the node
        is not said done."""
        self.store.set(store_keys.drained(self.config.node_rank), "1")
        self.ownership.hand_over()

    def leave(self, timeout: float = EXIT_BARRIER_S, wait_for_all: bool = False) -> bool:
        """Say this node is done; node 0 (and, with `wait_for_all`, this node) then waits until every node
        said so or is lost (bounded): node 0 keeps the stores up meanwhile. Returns False when it stopped
        waiting before that."""
        self.ownership.stop_beat()
        if self.store is None:
            return True
        try:
            self.store.set(store_keys.done(self.config.node_rank), "1")
        finally:  # after "done": a watcher that took this end for a loss reads that before it acts
            self.ownership.leave()
        if not (self.hosting or wait_for_all):
            return True
        deadline = time.monotonic() + timeout
        watch = node_liveness.BeatWatch(self.store, range(self.config.nnodes))
        while time.monotonic() < deadline:
            pending = [node for node in range(self.config.nnodes) if not self.store.check([store_keys.done(node)])]
            if not pending or set(pending) <= set(watch.lost(self.config.node_lost_after)):
                return self._standbys_left(deadline) if self.hosting else True
            time.sleep(POLL_S)
        return False

    def _standbys_left(self, deadline: float) -> bool:
        """Standbys that were not needed see the job end before node 0 takes the store down (a killed one
        never says so: bounded by --node-lost-after, and by STANDBY_LEAVE_S at least: a standby on a busy
        host may need seconds to see the end, and one that finds the store gone waits for a new node 0)."""
        deadline = min(deadline, time.monotonic() + max(self.config.node_lost_after, STANDBY_LEAVE_S))
        while self.store.add(store_keys.STANDBYS_LEFT, 0) < self.store.add(store_keys.STANDBYS, 0):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True
