"""A real controller (through the reference API) and ranks played by sockets of the test process that
speak the wire protocol: each registers, reports a scripted status, answers every action after an
optional delay with a scripted result, and records what it was sent. Fast enough to walk every
decision the controller makes after a fault, and exact about the messages it sends."""
import socket
import struct
import threading
import time

from controller_harness import wait_until
from mindio_adaptor import _native as nat
from mindio_adaptor.ttp import controller as ctl

T = nat.MSG_TYPES
ACTION_NAMES = {k: name for name, k in nat.ACTION_KINDS.items()}
QUIET_HEARTBEAT_MS = 600000  # the ranks send no heartbeats; a long period keeps them from being suspects
DATA_STATUS = {"updated": 0, "updating": 1, "copying": 2}
REPORT_STATE = {"retry": 1, "uce": 2, "uce_corrupted": 3, "hccl_failed": 4, "prerepair_finish": 6, "unknown": 8}


def frame(type_name, message, seq=0):
    return nat.encode_frame(T[type_name], seq, nat.encode_message(T[type_name], message))


class ScriptedRank:
    """One rank's connection. `results`: action name -> the result it replies; `delays`: action name ->
    seconds before it replies."""

    def __init__(self, port, rank, world_size, restarted=False, heartbeat_ms=QUIET_HEARTBEAT_MS):
        self.rank = rank
        self.actions = []  # (name, message dict) in the order received
        self.results, self.delays = {}, {}
        self.lock = threading.Lock()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(frame("REGISTER", {"rank": rank, "world_size": world_size, "heartbeat_ms": heartbeat_ms,
                                             "restarted": restarted, "pid": 1000 + rank}))
        type_, _, body = self._read_frame()
        ack = nat.decode_message(type_, body)
        assert type_ == T["REGISTER_ACK"] and ack["result"] == 0, ack
        self.sock.settimeout(None)
        self.reader = threading.Thread(target=self._serve, daemon=True)
        self.reader.start()

    def _read_exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def _read_frame(self):
        header = self._read_exactly(nat.FRAME_HEADER_SIZE)
        (length,) = struct.unpack_from("<I", header, 16)
        return nat.decode_frame(header + self._read_exactly(length))

    def _serve(self):
        try:
            while True:
                type_, seq, body = self._read_frame()
                if type_ == T["ACTION"]:
                    self._answer(seq, nat.decode_message(type_, body))
        except (ConnectionError, OSError):
            return

    def _answer(self, seq, action):
        name = ACTION_NAMES[action["kind"]]
        with self.lock:
            self.actions.append((name, action))
        time.sleep(self.delays.get(name, 0))
        reply = {"rank": self.rank, "kind": action["kind"], "result": self.results.get(name, 0)}
        self.send("ACTION_REPLY", reply, seq)

    def send(self, type_name, message, seq=0):
        self.sock.sendall(frame(type_name, message, seq))

    def status(self, step, data="updated", ckpt_step=-1):
        self.send("STATUS", {"rank": self.rank, "step": step, "data_status": DATA_STATUS[data], "ckpt_step": ckpt_step})

    def report(self, state):
        self.send("ERROR_REPORT", {"rank": self.rank, "state": REPORT_STATE[state]})

    def received(self, name=None):
        with self.lock:
            return [(n, a) for n, a in self.actions if name is None or n == name]

    def close(self):
        """Closes the connection as a dying process does (a bare close() would wait for the reader thread's recv)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class ScriptedJob:
    """`steps`: rank -> completed step; `layout`: [(optimizer_type, replica_cnt, ranks)], reported by rank 0."""

    def __init__(self, world_size, steps, layout=(), data=None, ckpt_steps=None, enable_arf=False, enable_uce=True,
                 heartbeat_ms=None):
        self.world_size = world_size
        ctl.tft_init_controller(-1, world_size, enable_arf=enable_arf, enable_uce=enable_uce)
        try:
            self.port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
            beats = heartbeat_ms or {}
            self.ranks = [ScriptedRank(self.port, r, world_size, heartbeat_ms=beats.get(r, QUIET_HEARTBEAT_MS))
                          for r in range(world_size)]
            if layout:
                # Before rank 0's status: once the controller shows that status, it has the layout too.
                groups = [{"optimizer_type": t, "replica_cnt": cnt, "ranks": list(ranks)} for t, cnt, ranks in layout]
                self.ranks[0].send("REPLICA_INFO", {"rank": 0, "groups": groups})
            for r, rank in enumerate(self.ranks):
                rank.status(steps[r], (data or {}).get(r, "updated"), (ckpt_steps or {}).get(r, -1))
            wait_until(lambda: ctl.controller_state() == "NORMAL", 5, "all ranks registered")
            wait_until(lambda: [v["step"] for v in ctl.controller_ranks()] == list(steps), 5, "the statuses")
        except BaseException:
            self.close()
            raise

    def events(self, kind):
        return [detail for _, k, detail in ctl.controller_events() if k == kind]

    def wait_state(self, *states, timeout=10):
        wait_until(lambda: ctl.controller_state() in states, timeout, f"controller state in {states}")

    def wait_event(self, kind, timeout=10):
        return wait_until(lambda: self.events(kind), timeout, f"a {kind} event")

    def actions_of(self, rank):
        return [name for name, _ in self.ranks[rank].received()]

    def close(self):
        try:
            ctl.tft_destroy_controller()
        finally:
            for rank in getattr(self, "ranks", []):
                rank.close()
