"""Which launchers are alive, and who owns a node rank: what lets a new launcher (a rescheduled pod, a
requeued Slurm step, a standby) take the place of a lost node while the others keep running.

- **The beat.** Every launcher adds 1 to `node/<R>/beat` in the launchers' store every `lost_after / 5`
  seconds, from a thread with its own store connection, so a launcher busy stopping workers still beats.
  A counter, not a time: the nodes' clocks need not agree. A node is lost when its beat does not move
  for `lost_after` seconds as seen by whoever watches.
- **A new node 0.** When node 0's launcher (the store's host) is lost, the beat keeps trying the same
  address and beats into the fresh store a replacement node 0 hosts there (launch/node0_loss).
- **The owner.** `node/<R>/owner` holds the incarnation that owns node rank R (1 for the first launcher).
  A launcher takes a lost node's rank by moving the owner from the incarnation it saw to the next one
  (compare-and-set: of several candidates, one wins). A launcher that was only stalled past `lost_after`
  (a busy host) finds on waking that it no longer owns its node: it stops its workers and exits, so two
  launchers never run the same ranks.
"""
from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Iterable, List, Optional

from torch.distributed import DistError, PrefixStore, Store, TCPStore

from mindio_adaptor.core.job.paired_store import answers
from mindio_adaptor.core.job.sealed_values import SealedStore, UnsealedValue


def store_listening(addr: str, port: int, timeout: float) -> bool:
    """Whether something accepts connections at addr:port. A plain probe before a TCPStore client: a
    client that cannot connect logs a stack trace per try, and the wait may last minutes."""
    return answers((addr, port), timeout)


def beat_key(node: int) -> str:
    return f"node/{node}/beat"


def owner_key(node: int) -> str:
    return f"node/{node}/owner"


def beat_period(lost_after: float) -> float:
    return max(0.05, lost_after / 5)


class NodeBeat:
    """This launcher's beat, on a connection of its own (a TCPStore client serialises its calls, and the
    main loop may sit in a bounded wait on the shared one).

    stop() waits for the thread to end. A daemon thread still inside a store call when the interpreter exits
    aborts the process: the call, returning, takes the GIL during finalisation, which unwinds the thread through
    torch's no-throw frames into std::terminate (a launcher whose job had succeeded exited -6 in CI). So every
    store call of the thread is bounded, by lost_after: a beat slower than that is a lost node anyway."""

    def __init__(self, addr: str, port: int, run_id: str, node: int, lost_after: float):
        self._key, self._period = beat_key(node), beat_period(lost_after)
        self._call_limit = timedelta(seconds=max(1.0, lost_after))
        self._addr, self._port, self._run_id = addr, port, run_id
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        store = self._connect()
        store.add(self._key, 1)
        self._thread = threading.Thread(target=self._run, args=(store,), name="node-beat", daemon=True)
        self._thread.start()

    def _connect(self) -> Store:
        return PrefixStore(self._run_id, TCPStore(self._addr, self._port, is_master=False,
                                                  timeout=self._call_limit, wait_for_workers=False))

    def _run(self, store: Optional[Store]) -> None:
        while not self._stop.wait(self._period):
            try:
                if store is None:
                    store = self._reconnect()
                if store is not None:
                    store.add(self._key, 1)
            except (DistError, RuntimeError):  # node 0 is gone: beat into the store of the next one
                store = None

    def _reconnect(self) -> Optional[Store]:
        """A connection to the store now listening at node 0's address, or None while none does."""
        if not store_listening(self._addr, self._port, timeout=self._period) or self._stop.is_set():
            return None
        return self._connect()

    def stop(self) -> None:
        """End the beat; returns once its thread has (bounded by the longest call it can be in)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._period + 2 * self._call_limit.total_seconds())


class BeatWatch:
    """Watches the beats of some nodes from the moment it is made: a node is lost once its beat has not
    moved for `lost_after` seconds of watching. It also keeps the owner each node had at its last beat:
    taking a lost node over starts from that owner, so a launcher that took it meanwhile is not
    taken over in turn. A node that never beat in this store is not lost: in a new node 0's store a
    survivor's owner is written back before its beat thread finds the store again, and a watch begun in
    between would otherwise take a live node over."""

    def __init__(self, store: Store, nodes: Iterable[int]):
        self._store = store
        now = time.monotonic()
        self._seen = {node: (_beat(store, node), owner_or_none(store, node), now) for node in nodes}

    def lost(self, lost_after: float) -> List[int]:
        now, lost = time.monotonic(), []
        for node, (beat, its_owner, since) in self._seen.items():
            current = _beat(self._store, node)
            if current != beat:
                self._seen[node] = (current, owner_or_none(self._store, node), now)
            elif current > 0 and now - since >= lost_after:
                lost.append(node)
        return lost

    def owner_at_last_beat(self, node: int) -> int:
        return self._seen[node][1]


def lost_nodes(store: Store, nodes: Iterable[int], lost_after: float) -> List[int]:
    """The nodes among `nodes` whose beat does not move for `lost_after` seconds from now."""
    watch = BeatWatch(store, nodes)
    time.sleep(lost_after)
    return watch.lost(lost_after)


def _beat(store: Store, node: int) -> int:
    return int(store.add(beat_key(node), 0))


def owner(store: SealedStore, node: int) -> int:
    """The incarnation that owns `node` (0: none yet); UnsealedValue when a stranger wrote the key over."""
    key = owner_key(node)
    return _incarnation(store.get(key).decode()) if store.raw.check([key]) else 0


def owner_or_none(store: SealedStore, node: int) -> int:
    """As owner(), with 0 for a stranger's value: a watcher never takes a node on it."""
    try:
        return owner(store, node)
    except UnsealedValue:
        return 0


def take_over(store: SealedStore, node: int, seen: int) -> Optional[int]:
    """Become the owner of `node` after incarnation `seen`; the new incarnation, or None when another
    launcher moved it first. The value written is unique to this launcher: two candidates after the same
    incarnation would otherwise both read their own desired value back from the compare-and-set."""
    key = owner_key(node)
    try:
        expected = store.get(key).decode() if seen else ""
    except UnsealedValue:
        expected = ""  # a stranger's value: compare_set replaces it, unless a launcher's came first
    if expected and _incarnation(expected) != seen:
        return None
    desired = f"{seen + 1}:{uuid.uuid4().hex}"
    return seen + 1 if store.compare_set(key, expected, desired).decode() == desired else None


def _incarnation(value: str) -> int:
    return int(value.split(":", 1)[0])
