"""Node 0's launcher tells the recovery controller when a lost node will not be replaced.

The controller waits up to MINDIO_ARF_WAIT_S (600 s by default) for a lost rank's restarted process, the
time a scheduler may take to start a new launcher of the node. When the node's launcher is proven gone
(its lifeline: launch/lifeline) and no standby waits to take its place, nothing in the job will start
those ranks again: node 0's launcher, which hosts the launchers' store and so sees every node, sends the
controllers a NoReplacement naming the node's ranks. With elastic training the controller then scales in
without them at once and grows back when a new launcher of the node brings them (a scale-out); without
it, the wait goes on, since only a new launcher can bring them back.

Nothing is reported for a node a standby takes (one waits, or it already owns the node rank), for a node
whose launcher ended its part of the job, nor for a host that vanished: with no proof from its kernel, the
controller's wait decides as before.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Tuple

from mindio_adaptor.launch import lifeline, node_liveness

RETRY_FOR_S = 30.0  # a report no controller took (one may be taking over) is tried again for this long
CHECK_PERIOD_S = 0.5  # between looks at the lifelines: each reads every node's lifeline key in the store


class UnreplacedNodes:
    """Each `check()` (the launcher's monitor tick): nodes proven lost that nothing takes, reported."""

    def __init__(self, node_store, nproc_per_node: int, nnodes: int, log):
        self._nodes, self._nproc, self._log = node_store, nproc_per_node, log
        self._watch = lifeline.LifelineWatch(node_store.store, range(1, nnodes))
        self._pending: Dict[int, Tuple[str, float]] = {}  # node -> (why, until when it is tried)
        self._next_check = 0.0

    def check(self, tell: Callable[[List[int], str], bool]) -> None:
        """`tell(ranks, why)` reports to the controllers; True once one took it."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_PERIOD_S
        for node, incarnation in self._watch.gone().items():
            why = self._unreplaced(node, incarnation)
            if why:
                self._pending[node] = (why, time.monotonic() + RETRY_FOR_S)
        for node, (why, until) in list(self._pending.items()):
            if tell(self.ranks_of(node), why) or time.monotonic() >= until:
                del self._pending[node]

    def ranks_of(self, node: int) -> List[int]:
        return list(range(node * self._nproc, (node + 1) * self._nproc))

    def _unreplaced(self, node: int, incarnation: int) -> str:
        """Why nothing will replace `node`, whose launcher `incarnation` is proven gone; empty when something
        will or nothing needs to. The standbys' count is read before the owner: a standby counts itself out
        only after it took the node rank."""
        if self._nodes.node_done(node):
            return ""
        if self._nodes.standby_waiting():
            self._log.info("node %d's launcher is gone (%s); a standby waits to take its place", node,
                           lifeline.EVIDENCE)
            return ""
        if node_liveness.owner_or_none(self._nodes.store, node) != incarnation:
            return ""  # taken already, by a standby or a new launcher
        return f"node {node}'s launcher is gone ({lifeline.EVIDENCE}) and no standby waits to take its place"

    def close(self) -> None:
        self._watch.close()
