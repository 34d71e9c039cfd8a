"""Node 0's launcher tells the recovery controller when a lost node will not be replaced.

The controller waits up to MINDIO_ARF_WAIT_S (600 s by default) for a lost rank's restarted process, the
time a scheduler may take to start a new launcher of the node. When the node is lost (its launcher proven
gone by its lifeline, launch/lifeline; or its beat silent for --node-lost-after, a host that vanished)
and no standby waits to take its place, nothing in the job will start those ranks again: node 0's
launcher, which hosts the launchers' store and so sees every node, sends the controllers a NoReplacement
naming the node's ranks (once per lost launcher). A stalled launcher's workers may still run: the
controller forgets the report when it hears from a rank again, and uses it only while it waits for the
replacement of ranks it already found lost. With elastic training the controller then scales in
without them at once and grows back when a new launcher of the node brings them (a scale-out); without
it, the wait goes on, since only a new launcher can bring them back.

Nothing is reported for a node a standby takes (one waits, or it already owns the node rank), nor for a
node whose launcher ended its part of the job.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Set, Tuple

from mindio_adaptor.launch import lifeline, node_liveness

RETRY_FOR_S = 30.0  # a report no controller took (one may be taking over) is tried again for this long
CHECK_PERIOD_S = 0.5  # between looks at the lifelines: each reads every node's lifeline key in the store


class UnreplacedNodes:
    """Each `check()` (the launcher's monitor tick): nodes proven lost that nothing takes, reported."""

    def __init__(self, node_store, nproc_per_node: int, nnodes: int, lost_after: float, log):
        self._nodes, self._nproc, self._lost_after, self._log = node_store, nproc_per_node, lost_after, log
        others = range(1, nnodes)
        self._lifelines = lifeline.LifelineWatch(node_store.store, others)
        self._beats = node_liveness.BeatWatch(node_store.store, others)
        # (node, its lost launcher's incarnation, the evidence): each judged once; a launcher found silent
        # and proven gone later is judged again
        self._judged: Set[Tuple[int, int, str]] = set()
        self._pending: Dict[int, Tuple[str, float]] = {}  # node -> (why, until when it is tried)
        self._next_check = 0.0

    def check(self, tell: Callable[[List[int], str], bool]) -> None:
        """`tell(ranks, why)` reports to the controllers; True once one took it."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_PERIOD_S
        for node, (incarnation, evidence) in self._lost().items():
            if not incarnation or (node, incarnation, evidence) in self._judged:
                continue  # never started, or judged already
            self._judged.add((node, incarnation, evidence))
            why = self._unreplaced(node, incarnation, evidence)
            if why:
                self._pending[node] = (why, time.monotonic() + RETRY_FOR_S)
        for node, (why, until) in list(self._pending.items()):
            if tell(self.ranks_of(node), why) or time.monotonic() >= until:
                del self._pending[node]

    def ranks_of(self, node: int) -> List[int]:
        return list(range(node * self._nproc, (node + 1) * self._nproc))

    def _lost(self) -> Dict[int, Tuple[int, str]]:
        """{node: (the incarnation lost, the evidence)}: a lifeline's proof wins over a silent beat."""
        silent = {node: (self._beats.owner_at_last_beat(node), f"its beat was silent for {self._lost_after:g} s")
                  for node in self._beats.lost(self._lost_after)}
        gone = {node: (incarnation, lifeline.EVIDENCE) for node, incarnation in self._lifelines.gone().items()}
        return {**silent, **gone}

    def _unreplaced(self, node: int, incarnation: int, evidence: str) -> str:
        """Why nothing will replace `node`, whose launcher `incarnation` is proven gone; empty when something
        will or nothing needs to. The standbys' count is read before the owner: a standby counts itself out
        only after it took the node rank."""
        if self._nodes.node_done(node):
            return ""
        if self._nodes.standby_waiting():
            self._log.info("node %d is lost (%s); a standby waits to take its place", node, evidence)
            return ""
        if node_liveness.owner_or_none(self._nodes.store, node) != incarnation:
            return ""  # taken already, by a standby or a new launcher
        return f"node {node} is lost ({evidence}) and no standby waits to take its place"

    def close(self) -> None:
        self._lifelines.close()
