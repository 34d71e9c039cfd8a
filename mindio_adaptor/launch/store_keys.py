"""The keys of the launchers' store (launch/node_store hosts it on node 0), under the job id: one name for each
thing the launchers agree on. Counters are moved by add() alone and are not sealed (core/job/sealed_values);
every other value is. And the error of launchers that could not meet over that store."""
from __future__ import annotations

import re
from typing import Dict

from mindio_adaptor.core.job.paired_store import ENV_STORES

GENERATION = "generation"  # the generation the job is in (moved by compare-and-set)
END = "end"  # why the job ends (a node gave up, or was signalled); every launcher stops its workers
CONTROLLER_END = "controller_end"  # a worker exited ENDED_BY_CONTROLLER: nothing is restarted any more
STANDBYS, STANDBYS_LEFT = "standbys", "standbys_left"  # counters: standby launchers that joined, that left
JOB_RUNNING = "job_running"  # written by launchers that rejoined a new node 0's store: a job runs already



class NodeStoreError(RuntimeError):
    """The launchers could not meet, or disagree (the message names the node and the problem)."""


_COUNTER = re.compile(r"node/\d+(/beat)?")


def is_counter(key: str) -> bool:
    return key in (STANDBYS, STANDBYS_LEFT) or bool(_COUNTER.fullmatch(key))


def node(node_rank: int) -> str:
    return f"node/{node_rank}"  # counter: launchers of this node rank that joined


def done(node_rank: int) -> str:
    return f"node/{node_rank}/done"


def drained(node_rank: int) -> str:
    return f"node/{node_rank}/drained"  # its launcher left the node to a standby (a hot switch of every local rank)


def config(node_rank: int) -> str:
    return f"node/{node_rank}/config"


def port(generation: int) -> str:
    return f"generation/{generation}/port"


def store(generation: int, node_rank: int) -> str:
    return f"generation/{generation}/store/{node_rank}"  # host:port of the workers' store beside its controller


def stores_keys(generation: int, env: Dict[str, str]) -> Dict[str, str]:
    """The launchers' store keys that `env` (what NodeStore.worker_stores returned) was read from."""
    if not env:
        return {}
    return {store(generation, node_rank): address for node_rank, address in enumerate(env[ENV_STORES].split(","))}
