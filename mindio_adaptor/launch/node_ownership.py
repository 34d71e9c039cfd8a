"""A launcher's claim on its node rank, and the evidence by which one launcher takes another's place: the
incarnation it holds (one more per launcher that took the rank), its beat and its lifeline (launch/node_liveness,
launch/lifeline), and how it knew that the node it took was lost. The one object behind a node's membership:
the launchers' store (launch/node_store) only carries it."""
from __future__ import annotations

from typing import Optional

from mindio_adaptor.core.job.sealed_values import UnsealedValue
from mindio_adaptor.launch import lifeline, node_liveness, store_keys
from mindio_adaptor.launch.controllers import reachable_host
from mindio_adaptor.launch.store_keys import NodeStoreError

DRAINED_EVIDENCE = "its launcher handed it over (every local rank was switched to a standby: a drain)"


class NodeOwnership:
    def __init__(self, nodes):
        self.nodes = nodes  # the NodeStore: the launchers' store (which a rejoin replaces) and its address
        self.incarnation = 0  # which launcher of this node rank this is (1: the first; more: replacements)
        self.owner_value = ""  # what this launcher wrote as its node rank's owner (a rejoin writes it back)
        self.lost_evidence = ""  # a replacing launcher: how it knew the node it took was lost
        self.took_drained_node = False  # the node it took was drained (its ranks handed over alive), not lost
        self.lifeline: Optional[lifeline.Lifeline] = None  # this launcher's, once it owns a node rank
        self._beat: Optional[node_liveness.NodeBeat] = None

    @property
    def replacing(self) -> bool:
        """This launcher took the place of a lost node in a running job: its workers start as replacements."""
        return self.incarnation > 1

    def own(self, node: int, first: bool, lost_owner: Optional[int] = None) -> None:
        """Own `node`: the first launcher of it, or one that takes it from a lost owner (`lost_owner`: the
        owner a watch already judged lost, else this judges it: its lifeline refused, or its beat silent for
        --node-lost-after)."""
        cfg, store = self.nodes.config, self.nodes.store
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
        store.delete_key(store_keys.done(node))
        store.delete_key(store_keys.drained(node))  # said once: a later loss of this node is a loss
        self.owner_value = store.get(node_liveness.owner_key(node)).decode()
        self._beat = node_liveness.NodeBeat(cfg.master_addr, self.nodes.port, cfg.run_id, node, cfg.node_lost_after)
        self._beat.start()
        self.lifeline = lifeline.Lifeline(reachable_host(cfg))
        self.lifeline.publish(store, node, incarnation)

    def take_lost(self, node: int, lost_owner: int, gone: bool) -> None:
        """A standby takes `node`, which its watch judged lost: `gone` when its lifeline proved the launcher's
        process gone, else its beat was silent (or the node was drained: its ranks handed over alive)."""
        self.took_drained_node = self.nodes.store.check([store_keys.drained(node)])
        self.lost_evidence = (DRAINED_EVIDENCE if self.took_drained_node else
                              lifeline.EVIDENCE if gone else self._silence())
        self.own(node, first=False, lost_owner=lost_owner)

    def _judged_lost(self, node: int, owner: int) -> bool:
        """Whether the launcher owning `node` is gone: at once when its lifeline's port refuses connections,
        else when its beat stays still for --node-lost-after."""
        address = lifeline.published(self.nodes.store, node)
        if address is not None and address.incarnation == owner and lifeline.refused(address):
            self.lost_evidence = lifeline.EVIDENCE
            return True
        self.lost_evidence = self._silence()
        return bool(node_liveness.lost_nodes(self.nodes.store, [node], self.nodes.config.node_lost_after))

    def _silence(self) -> str:
        return f"its beat was silent for {self.nodes.config.node_lost_after:g} s"

    def still_owner(self) -> bool:
        """False once another launcher took this node rank (this one was silent too long). An unsealed owner
        is a stranger's write: no launcher took the node, and this one owns it still."""
        try:
            return node_liveness.owner(self.nodes.store, self.nodes.config.node_rank) == self.incarnation
        except UnsealedValue:
            return True

    def publish_in(self, store) -> None:
        """Beat once and publish the lifeline in a new node 0's store: a standby's watch of this node starts
        from there, and this node's beat thread, which finds the new store on its own, then only has to keep
        it moving."""
        node = self.nodes.config.node_rank
        store.add(node_liveness.beat_key(node), 1)
        if self.lifeline is not None:
            self.lifeline.publish(store, node, self.incarnation)

    def stop_beat(self) -> None:
        """Stop beating for this node (at the latest before the launcher exits: see NodeBeat)."""
        if self._beat is not None:
            self._beat.stop()

    def hand_over(self) -> None:
        """The node goes to a standby (a drain): no beat, and the lifeline closes with no goodbye, so that the
        standby takes the place as a lost node's."""
        self.stop_beat()
        if self.lifeline is not None:
            self.lifeline.hand_over()

    def leave(self) -> None:
        """The lifeline's goodbye: a watcher that took this launcher's end for a loss reads 'done' first."""
        if self.lifeline is not None:
            self.lifeline.leave()
