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
  (core/comm's epochs).
"""
from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Dict, Optional

from torch.distributed import Store, TCPStore
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.utils.distributed import get_free_port

from mindio_adaptor.core.comm import host_store
from mindio_adaptor.launch.config import LaunchConfig

EXIT_BARRIER_S = 300.0  # torchrun's exit barrier: node 0 keeps the stores up until every node is done
POLL_S = 0.05

GENERATION = "generation"  # counter: the generation the job is in
END = "end"  # why the job ends (a node gave up, or was signalled); every launcher stops its workers
CONTROLLER_END = "controller_end"  # a worker exited ENDED_BY_CONTROLLER: nothing is restarted any more
DONE = "done"  # counter: launchers that finished


class NodeStoreError(RuntimeError):
    """The launchers could not meet, or disagree (the message names the node and the problem)."""


def _key_port(generation: int) -> str:
    return f"generation/{generation}/port"


class NodeStore:
    def __init__(self, config: LaunchConfig):
        self.config = config
        self.store: Optional[Store] = None
        self.port = config.master_port or get_free_port()  # 0 (one node): any free port, as torchrun's --standalone
        self._worker_stores: Dict[int, TCPStore] = {}  # node 0: generation -> the store it hosts

    @property
    def hosting(self) -> bool:
        return self.config.node_rank == 0

    def join(self) -> None:
        """Meet the other launchers (bounded by --rdzv-conf timeout) and check that they agree."""
        cfg = self.config
        rendezvous = StaticTCPRendezvous(cfg.master_addr, self.port, cfg.node_rank, cfg.nnodes, cfg.run_id,
                                         max(1, round(cfg.rdzv_timeout)))  # whole seconds there
        try:
            self.store = rendezvous.next_rendezvous().store
        except (RuntimeError, TimeoutError) as err:
            where = "host" if self.hosting else "reach node 0's"
            raise NodeStoreError(f"could not {where} launchers' store at {cfg.master_addr}:{self.port} with all "
                                 f"{cfg.nnodes} nodes within {cfg.rdzv_timeout:.0f} s: {err}") from None
        self._check_members()

    def _check_members(self) -> None:
        """One launcher per node rank, and the same number of workers on each (ranks are node-major)."""
        cfg, store = self.config, self.store
        if store.add(f"node/{cfg.node_rank}", 1) != 1:
            raise NodeStoreError(f"another launcher already joined as --node-rank {cfg.node_rank}")
        mine = {"nproc_per_node": cfg.nproc_per_node, "nnodes": cfg.nnodes}
        store.set(f"node/{cfg.node_rank}/config", json.dumps(mine))
        for node in range(cfg.nnodes):
            theirs = json.loads(store.get(f"node/{node}/config"))
            if theirs != mine:
                raise NodeStoreError(f"node {node} was started with {theirs}, this node with {mine}; every "
                                     f"launcher needs the same --nnodes and --nproc-per-node")

    def generation(self) -> int:
        return int(self.store.add(GENERATION, 0))

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
            return store.port
        self.store.wait([key], timedelta(seconds=self.config.rdzv_timeout))
        return int(self.store.get(key))

    def end(self, reason: str) -> None:
        self.store.set(END, reason)

    def end_reason(self) -> Optional[str]:
        return self.store.get(END).decode() if self.store.check([END]) else None

    def mark_controller_end(self) -> None:
        self.store.set(CONTROLLER_END, str(self.config.node_rank))

    def controller_ended(self) -> bool:
        return self.store.check([CONTROLLER_END])

    def leave(self, timeout: float = EXIT_BARRIER_S) -> bool:
        """Say this node is done; node 0 then keeps the stores up until every node said so (bounded).
        Returns False when node 0 stopped waiting before every node was done."""
        if self.store is None:
            return True
        count = int(self.store.add(DONE, 1))
        if not self.hosting:
            return True
        deadline = time.monotonic() + timeout
        while count < self.config.nnodes and time.monotonic() < deadline:
            time.sleep(POLL_S)
            count = int(self.store.add(DONE, 0))
        return count >= self.config.nnodes
