"""A launcher's lifeline: proof that its process is gone, seconds before its silent beat would say so.

The beat (launch/node_liveness) cannot tell a lost launcher from a stalled one before `--node-lost-after`,
and taking over a stalled one kills its healthy workers, so that wait stays long. A dead process is told
apart sooner by the kernel of its host: every launcher that owns a node rank listens on a port of its own
(`node/<R>/lifeline` in the launchers' store: owner incarnation, host, port) and never answers on it.
A watcher holds a connection there. The launcher's death closes the connection (its kernel sends FIN or
RST), and a new connection to the same port is then refused: nothing listens any more. Both together
prove the process is gone, while a stalled launcher keeps both its connection and its listening socket
(the kernel accepts for it). A launcher that leaves on purpose sends one byte first, so its end is never
taken for a loss. A host that vanished (power, network) gives no answer at all: then only the beat
decides, as before.
"""
from __future__ import annotations

import select
import selectors
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, Optional, Set

if TYPE_CHECKING:  # the holder side runs in every launcher; it needs no torch
    from torch.distributed import Store

GOODBYE = b"L"  # sent before a deliberate close: this launcher left, it was not lost
EVIDENCE = "its launcher's process is gone: its lifeline closed and its port refuses connections"
CONNECT_S = 1.0  # a watcher's connection attempt; a host that does not answer by then is left to the beat
MAX_HELD = 256  # connections a lifeline holds at once (a few watchers each hold one)
LEAVE_S = 5.0  # the longest leave() waits for the goodbyes to go out


def lifeline_key(node: int) -> str:
    return f"node/{node}/lifeline"


@dataclass(frozen=True)
class LifelineAddress:
    incarnation: int  # the owner of the node rank that listens there
    host: str
    port: int

    def encode(self) -> str:
        return f"{self.incarnation}:{self.host}:{self.port}"

    @staticmethod
    def decode(text: str) -> "LifelineAddress":
        incarnation, place = text.split(":", 1)
        host, port = place.rsplit(":", 1)
        return LifelineAddress(int(incarnation), host, int(port))


def published(store: Store, node: int) -> Optional[LifelineAddress]:
    key = lifeline_key(node)
    if not store.check([key]):
        return None
    try:
        return LifelineAddress.decode(store.get(key).decode())
    except ValueError:
        return None  # not ours to judge: the beat still decides for that node


class Lifeline:
    """This launcher's end of it: a listening socket whose connections are held open and never answered.

    A held connection whose peer closed it is dropped (it proves nothing to anybody), and at most MAX_HELD
    are held: beyond that a new one is closed at once. Its watcher then sees a closed connection to a port
    that still listens, which is no proof of a death: that node is left to the beat, never taken."""

    def __init__(self, host: str):
        self._server = socket.create_server(("", 0), backlog=64)
        self._server.setblocking(False)
        self.host, self.port = host, self._server.getsockname()[1]
        self._held: Set[socket.socket] = set()
        self._refused_over_cap = 0
        self._leaving = threading.Event()
        self._goodbye = True  # False: a hand-over, the watchers must see the node go as a lost one
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="lifeline", daemon=True)
        self._thread.start()

    def publish(self, store: Store, node: int, incarnation: int) -> None:
        store.set(lifeline_key(node), LifelineAddress(incarnation, self.host, self.port).encode())

    def held(self) -> int:
        return len(self._held)

    def _serve(self) -> None:
        while not self._leaving.is_set():
            for key, _ in self._selector.select(timeout=1.0):
                if key.fileobj is self._server:
                    self._accept_all()
                elif key.fileobj is not self._wake_r:
                    self._check_held(key.fileobj)
        self._say_goodbyes() if self._goodbye else self._close_quietly()

    def _accept_all(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # nothing more queued (or at the fd limit: tried again on the next wake-up)
                return
            if len(self._held) >= MAX_HELD:
                self._refused_over_cap += 1
                conn.close()
                continue
            conn.setblocking(False)
            self._held.add(conn)
            self._selector.register(conn, selectors.EVENT_READ)

    def _check_held(self, conn: socket.socket) -> None:
        """A watcher never writes: readable means its end closed (drop it) or stray bytes (read, ignored)."""
        try:
            if conn.recv(4096):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._selector.unregister(conn)
        self._held.discard(conn)
        conn.close()

    def _say_goodbyes(self) -> None:
        for conn in list(self._held):
            _say_goodbye(conn)
        self._held.clear()
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                break
            _say_goodbye(conn)
        self._selector.close()
        self._server.close()
        self._wake_r.close()
        self._wake_w.close()

    def _close_quietly(self) -> None:
        """The listening socket first, so that a watcher whose connection then closes finds the port refused."""
        self._selector.close()
        self._server.close()
        for conn in list(self._held):
            conn.close()
        self._held.clear()
        self._wake_r.close()
        self._wake_w.close()

    def hand_over(self) -> None:
        """Stop listening with no goodbye: the watchers see the node go as a lost one's, so a standby takes
        its place (a node drained by a hot switch: launch/hand_overs)."""
        self._goodbye = False
        self.leave()

    def leave(self) -> None:
        """Say goodbye on every connection, those still in the listen queue too, then stop listening: the
        watchers see a departure. (One that connects in the instant before the close sees a loss: the
        caller says the node is done before this, and a watcher checks that before it takes the node.)"""
        self._leaving.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(LEAVE_S)


def _say_goodbye(conn: socket.socket) -> None:
    try:
        conn.sendall(GOODBYE)
    except OSError:
        pass
    conn.close()


def refused(address: LifelineAddress, timeout: float = CONNECT_S) -> bool:
    """True when the host answered that nothing listens at the address: the process is gone."""
    try:
        socket.create_connection((address.host, address.port), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # unreachable or slow: no proof either way
    return False


class LifelineWatch:
    """A watcher's side for some nodes: `gone()` names those whose launcher process is proven gone."""

    def __init__(self, store: Store, nodes: Iterable[int]):
        self._store = store
        self._nodes = list(nodes)
        self._conns: Dict[int, socket.socket] = {}
        self._addresses: Dict[int, LifelineAddress] = {}
        self._done: set = set()  # addresses that left, or could not be held: the beat decides for them

    def gone(self) -> Dict[int, int]:
        """{node: the incarnation proven gone}, for nodes whose held connection closed without a goodbye
        and whose address now refuses connections."""
        self._connect_new()
        if not self._conns:
            return {}
        readable, _, _ = select.select(list(self._conns.values()), [], [], 0)
        gone = {}
        for node in [n for n, conn in self._conns.items() if conn in readable]:
            end = _how_it_ended(self._conns[node])
            if end is None:
                continue  # nothing conclusive: keep holding it
            self._conns.pop(node).close()
            address = self._addresses[node]
            if end == "closed" and refused(address):
                gone[node] = address.incarnation
            else:
                self._done.add(address)
        return gone

    def _connect_new(self) -> None:
        """Hold a connection to each node's current lifeline (again after a new owner published its own)."""
        for node in self._nodes:
            address = published(self._store, node)
            if address is None or address in self._done or self._addresses.get(node) == address:
                continue
            old = self._conns.pop(node, None)
            if old is not None:
                old.close()
            self._addresses[node] = address
            try:
                self._conns[node] = socket.create_connection((address.host, address.port), timeout=CONNECT_S)
            except OSError:
                self._done.add(address)  # refused before it was ever held, or unreachable: no proof of a death

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def _how_it_ended(conn: socket.socket) -> Optional[str]:
    """"closed" (FIN or RST with no goodbye), "left" (a goodbye came), "unknown" (contact lost with no proof
    of a death, e.g. a keepalive timeout), or None while nothing conclusive arrived."""
    try:
        data = conn.recv(16, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except OSError:
        return "unknown"
    if GOODBYE in data:
        return "left"
    return "closed" if not data else None  # a launcher never writes anything but the goodbye
