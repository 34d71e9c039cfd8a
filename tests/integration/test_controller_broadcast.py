"""How the controller sends one action to many ranks: one frame for all (one sequence number per
action), queued as one batch; the PRELOCK that is sent without waiting for replies leaves with the
STOP that follows, in the same write, unless the decision waits for a policy in between. Ranks are
played by hand over raw sockets, so that every frame each one receives, and in which read, is seen."""
import socket
import struct
import threading
import time

import pytest

from controller_harness import wait_until
from mindio_adaptor import _native as nat
from mindio_adaptor.ttp import controller as ctl

pytestmark = pytest.mark.integration
T = nat.MSG_TYPES
KIND = {v: k for k, v in nat.ACTION_KINDS.items()}
WORLD = 8
HEARTBEAT_MS = 500  # a Python thread beats every half period; a loaded host must not make a live rank look dead
STEP = 5


def frame(type_name, message, seq=0):
    return nat.encode_frame(T[type_name], seq, nat.encode_message(T[type_name], message))


class FakeRank:
    """One registered rank: heartbeats every half period until silenced, answers every action with
    success, and records each read's complete frames as (kind, seq, raw frame bytes)."""

    def __init__(self, port, rank):
        self.rank = rank
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()
        self.reads = []  # per read that completed an action frame: [(kind name, seq, bytes)]
        self.silent = threading.Event()
        self.done = threading.Event()
        self.acked = threading.Event()
        self.send(frame("REGISTER", {"rank": rank, "world_size": WORLD, "heartbeat_ms": HEARTBEAT_MS}))
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._beat, daemon=True)]
        for t in self.threads:
            t.start()
        assert self.acked.wait(5), f"rank {rank} was not acknowledged"
        group = {"optimizer_type": 0, "replica_cnt": 2, "replica_shift": 0, "ranks": list(range(WORLD))}
        self.send(frame("REPLICA_INFO", {"rank": rank, "groups": [group]}))
        self.send(frame("STATUS", {"rank": rank, "step": STEP}))

    def send(self, data):
        with self.send_lock:
            self.sock.sendall(data)

    def _beat(self):
        while not self.done.wait(HEARTBEAT_MS / 2000):
            if not self.silent.is_set():
                try:
                    self.send(frame("HEARTBEAT", {"rank": self.rank, "step": STEP}))
                except OSError:
                    return  # the controller closed the connection

    def _read(self):
        buffer = b""
        while not self.done.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            actions = []
            while len(buffer) >= nat.FRAME_HEADER_SIZE:
                total = nat.FRAME_HEADER_SIZE + struct.unpack_from("<I", buffer, 16)[0]
                if len(buffer) < total:
                    break
                raw, buffer = buffer[:total], buffer[total:]
                type_, seq, body = nat.decode_frame(raw)
                if type_ == T["REGISTER_ACK"]:
                    assert nat.decode_message(type_, body)["result"] == 0
                    self.acked.set()
                elif type_ == T["ACTION"]:
                    kind = nat.decode_message(type_, body)["kind"]
                    actions.append((KIND[kind], seq, raw))
                    self.send(frame("ACTION_REPLY", {"rank": self.rank, "kind": kind, "result": 0}, seq))
            if actions:
                with self.lock:
                    self.reads.append(actions)

    def actions(self):
        """[(kind name, seq, bytes, index of the read that brought it)]"""
        with self.lock:
            return [(k, s, raw, i) for i, read in enumerate(self.reads) for k, s, raw in read]

    def close(self):
        self.done.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


@pytest.fixture
def fake_job(job_env, monkeypatch):
    monkeypatch.setenv("MINDIO_SILENCE_LIMIT_S", "1")
    ctl.tft_init_controller(-1, WORLD)
    port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
    ranks = []
    try:
        ranks.extend(FakeRank(port, r) for r in range(WORLD))
        wait_until(lambda: ctl.controller_state() == "NORMAL", 10, "all ranks registered")
        yield ranks
    finally:
        ctl.tft_destroy_controller()
        for r in ranks:
            r.close()


def test_stop_reaches_every_live_rank_once_with_the_prelock_and_skips_a_dead_one(fake_job):
    ranks = fake_job
    ranks[6].silent.set()  # still connected, but no heartbeat: a suspect, then hung at the silence limit
    live = [r for r in ranks if r.rank != 6]
    wait_until(lambda: all(any(k == "exit" for k, *_ in r.actions()) for r in live), 15, "EXIT at every live rank")

    assert ranks[6].actions() == []  # dead: nothing is sent to it, though its connection is open
    # Node fault without ARF: dump. DP [0..7], R=2, rank 6 dead: savers 0..3, rank 0 renames.
    for r in live:
        kinds = [k for k, *_ in r.actions()]
        expected = ["prelock", "stop"] + (["save_ckpt"] if r.rank < 4 else []) + (["rename"] if r.rank == 0 else [])
        assert kinds == expected + ["exit"], (r.rank, kinds)
    stops = [next(a for a in r.actions() if a[0] == "stop") for r in live]
    prelocks = [next(a for a in r.actions() if a[0] == "prelock") for r in live]
    # One frame per action: the same sequence number and the same bytes at every rank.
    assert len({s for _, s, _, _ in stops}) == 1 and len({raw for _, _, raw, _ in stops}) == 1
    assert len({raw for _, _, raw, _ in prelocks}) == 1
    # The PRELOCK (no reply awaited) was held back and left with the STOP: same read, in sequence order.
    for (_, lock_seq, _, lock_read), (_, stop_seq, _, stop_read) in zip(prelocks, stops):
        assert lock_seq + 1 == stop_seq and lock_read == stop_read
    assert [d.split(" ")[0] for _, k, d in ctl.controller_events() if k == "action"] == [
        "prelock", "stop", "save_ckpt", "rename", "exit"]


def test_prelock_is_not_held_while_a_policy_is_consulted(fake_job):
    ranks = fake_job
    seen = {}

    def policy(rank, state, code):
        # Called between the decision and the STOP: every rank must hold the lock by now.
        seen["locked"] = all(wait_for_prelock(r) for r in ranks)
        seen["stopped"] = any(k == "stop" for r in ranks for k, *_ in r.actions())
        return "retry"

    def wait_for_prelock(rank, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(k == "prelock" for k, *_ in rank.actions()):
                return True
            time.sleep(0.01)
        return False

    ctl.tft_set_fault_policy(policy, timeout_s=10)
    ranks[3].send(frame("ERROR_REPORT", {"rank": 3, "state": 2, "error_code": "80E01801"}))  # UCE
    wait_until(lambda: all(any(k == "normal" for k, *_ in r.actions()) for r in ranks), 15, "NORMAL everywhere")

    assert seen == {"locked": True, "stopped": False}
    for r in ranks:
        kinds = [k for k, *_ in r.actions()]
        assert kinds == ["prelock", "stop", "clean"] + (["repair"] if r.rank in (3, 7) else []) + [
            "rollback", "normal"], (r.rank, kinds)
        (_, _, _, lock_read), (_, _, _, stop_read) = r.actions()[:2]
        assert lock_read < stop_read  # the lock went out before the policy answered, alone
