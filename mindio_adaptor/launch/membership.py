"""The job's controllers and workers' stores as they are when a launcher starts a process: what every worker's
environment carries (MINDIO_CONTROLLER_ADDR, MINDIO_TOKEN, MINDIO_STORE_ADDRS, MASTER_PORT), read again from
the launchers' store at each start, and MINDIO_REHOSTED_SLOT where it applies.

Why at each start: a lost controller-hosting node's new launcher hosts its slot again on new ports and
writes them into the launchers' store (launch/controllers, launch/node_store); the members adopt them
(core/job/rehosted_slot). A process started later from lists its launcher read at its own start, or at the
generation's, got the dead slot: in the chaos soak of issue 30 (node 1 replaced, then node 0, then a rank of
node 1 killed) the rank's replacement read the first node 0's store and died, 50 times.

MINDIO_REHOSTED_SLOT applies to the processes a launcher that replaced a lost controller-hosting node starts
into the generation it joined, until the members adopted the slot (they mark its store, REHOSTED_STORE_ADOPTED):
those must announce the slot's new addresses, and must not read the job's facts from the new store, which
holds none yet. Its first workers get it; so does one of them started again before the adoption (its peers on
the node may have died before announcing). A later replacement does not: the new store holds the facts by
then, and may be the only one that answers (issue 30: the variable made a replacement skip it). Nor does a
later generation: a group restart gives every process the same new lists, so there is nothing to announce.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from torch.distributed import DistError

from mindio_adaptor.core.job.paired_store import ENV_REHOSTED_SLOT, ENV_STORES
from mindio_adaptor.launch.controllers import controllers_env


@dataclass(frozen=True)
class Membership:
    master_port: int  # the generation's workers' store on node 0 (MASTER_PORT)
    lists: Dict[str, str] = field(default_factory=dict)  # controllers, token, workers' stores (empty: in-job)

    def env(self) -> Dict[str, str]:
        return {"MASTER_PORT": str(self.master_port), **self.lists}

    def describe(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in sorted(self.env().items()) if key != "MINDIO_TOKEN")


@dataclass
class KnownLists:
    """The job's lists as this launcher last read them: what a process it starts gets, and what it writes back
    into a new node 0's store (launch/node0_loss.Node0Loss.rejoin)."""
    master_port: int = 0
    controllers: Dict[str, str] = field(default_factory=dict)  # the controllers' list and token
    stores: Dict[str, str] = field(default_factory=dict)  # the generation's workers' stores beside the controllers

    def refresh(self, config, store, generation: int) -> Membership:
        """The lists now (`current`), kept as the last known."""
        now = current(config, store, generation, Membership(self.master_port, {**self.controllers, **self.stores}))
        self.master_port = now.master_port
        self.controllers = {k: v for k, v in now.lists.items() if k != ENV_STORES}
        self.stores = {k: v for k, v in now.lists.items() if k == ENV_STORES}
        return now


def current(config, store, generation: int, known: Membership) -> Membership:
    """The job's lists now (launch/node_store); `known` where the launchers' store is gone (node 0 lost:
    nothing newer can be known) or has no port of the generation yet (a new node 0 has not opened it)."""
    try:
        port = store.generation_port(generation)
        lists = {**controllers_env(config, store, generation), **store.worker_stores(generation)}
    except DistError:
        return known
    return Membership(port or known.master_port, lists)


def rehosted_slot_env(config, store, rehosts: bool, joined_generation: Optional[int], generation: int) -> Dict[str, str]:
    """MINDIO_REHOSTED_SLOT for a process this launcher starts now, where it applies (see the module's doc)."""
    if not rehosts or generation != joined_generation or store.rehosted_store_adopted(generation):
        return {}
    return {ENV_REHOSTED_SLOT: str(config.node_rank)}
