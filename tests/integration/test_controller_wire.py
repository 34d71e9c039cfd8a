"""The wire under abuse: fuzzed malformed frames against a live controller whose processors keep
working, and sequence-number idempotency of a real processor against a scripted controller."""
import random
import socket
import struct
import threading
import time

import pytest

from controller_harness import Job, wait_until, frame, read_until_closed
from controller_harness import register_frame as harness_register_frame
from mindio_adaptor import _native as nat
from mindio_adaptor.launch.controller_report import ControllerContact, ControllerReportError, report_process_ended
from mindio_adaptor.ttp import controller as ctl
from mindio_adaptor.ttp import processor as tp

pytestmark = pytest.mark.integration
T = nat.MSG_TYPES
TOKEN = "fuzz-test-token"


def register_frame(rank=0, world_size=4, token=TOKEN):
    return harness_register_frame(token, rank, world_size)


def closed_by_peer(sock, timeout=4.0):
    return read_until_closed(sock, timeout, "a malformed connection")


def malformed_cases(rng):
    valid = register_frame()
    cases = []
    for _ in range(8):
        cases.append(("truncated", valid[:rng.randrange(1, len(valid))]))
        cases.append(("oversized", struct.pack("<IHHQII", nat.FRAME_MAGIC, 1, T["HEARTBEAT"], 0,
                                               nat.FRAME_MAX_BODY + 1 + rng.randrange(1 << 20), 0)))
        bad_magic = bytearray(valid)
        bad_magic[rng.randrange(4)] ^= 1 + rng.randrange(255)
        cases.append(("wrong magic", bytes(bad_magic)))
        bad_crc = bytearray(valid)
        bad_crc[nat.FRAME_HEADER_SIZE + rng.randrange(len(valid) - nat.FRAME_HEADER_SIZE)] ^= 0x40
        cases.append(("wrong checksum", bytes(bad_crc)))
        cases.append(("random bytes", bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300)))))
        cases.append(("unregistered heartbeat", frame("HEARTBEAT", {"rank": rng.randrange(4), "step": 1})))
        cases.append(("bad body", nat.encode_frame(T["REGISTER"], 0, bytes(rng.getrandbits(8) for _ in range(7)))))
    return cases


def test_fuzzed_frames_are_rejected_while_processors_keep_working(tmp_path, monkeypatch):
    for key, value in {"MINDIO_TOKEN": TOKEN, "MINDIO_REGISTER_TIMEOUT": "1", "MINDIO_FAULT_COLLECT_TIME": "0.2",
                       "MINDIO_TEST_ACTION_TIME_LIMIT": "5"}.items():
        monkeypatch.setenv(key, value)
    job = Job(tmp_path, 4, fail_rank=1)
    try:
        job.wait_ready()
        before = ctl.controller_stats()["rejected_frames"]
        rng = random.Random(20261122)
        cases = malformed_cases(rng)
        for name, data in cases:
            with socket.create_connection(("127.0.0.1", job.port), timeout=3) as s:
                s.sendall(data)
                if name != "unregistered heartbeat":
                    s.shutdown(socket.SHUT_WR)
                closed_by_peer(s)
        # A stalled half frame and a wrong token: refused without any help from the client.
        stalled = [socket.create_connection(("127.0.0.1", job.port), timeout=3) for _ in range(3)]
        for s in stalled:
            s.sendall(register_frame()[:10])
        with socket.create_connection(("127.0.0.1", job.port), timeout=3) as s:
            s.sendall(register_frame(rank=2, token="not-the-token"))
            reply = closed_by_peer(s)
            _, _, body = nat.decode_frame(reply)
            assert nat.decode_message(T["REGISTER_ACK"], body) == {"result": 1,
                                                                   "message": "wrong token (MINDIO_TOKEN differs)",
                                                                   "replacement": False, "term": 0}
        for s in stalled:
            closed_by_peer(s, timeout=3)
            s.close()
        _launcher_reports_that_change_nothing(job)
        stats = ctl.controller_stats()
        framing_errors = sum(1 for name, _ in cases if name not in ("unregistered heartbeat", "bad body"))
        assert stats["rejected_frames"] - before >= framing_errors + len(stalled)
        assert stats["refused_registrations"] == 1
        assert stats["registered"] == 4 and stats["dead"] == 0
        assert ctl.controller_state() == "NORMAL"
        # The real processors never noticed: a full online repair still runs.
        job.fire()
        results = job.wait_results(range(4))
        assert all(r["result"] == "done" for r in results.values()), results
        assert [d for _, _, d in job.controller_events("repair_plan")] == ["type 0 src=[3] dst=[1]"]
    finally:
        job.close()


def _launcher_reports_that_change_nothing(job):
    """A wrong token and a rank out of range are refused; a pid the rank did not register with (a late
    report about a process already replaced) is acknowledged and ignored."""
    live = job.procs[2].pid
    contact = ControllerContact("127.0.0.1", job.port, TOKEN)
    with pytest.raises(ControllerReportError, match=r"refused the report: wrong token \(MINDIO_TOKEN differs\)"):
        report_process_ended(ControllerContact("127.0.0.1", job.port, "not-the-token"), 2, live, "signal SIGKILL")
    with pytest.raises(ControllerReportError, match="refused the report: rank 4 is out of range 0..3"):
        report_process_ended(contact, 4, live, "signal SIGKILL")
    stale = live + 100000
    assert report_process_ended(contact, 2, stale, "exit code 1").message == \
        f"rank 2 is now another process: process {stale} (exit code 1) changes nothing"


class ScriptedController:
    """A listening socket that plays the controller's side of the protocol by hand."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(10)
        self.port = self.server.getsockname()[1]
        self.conn = None
        self.buffer = b""
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.conn, _ = self.server.accept()
        self.conn.settimeout(5)
        type_, _, _ = self.read_frame()
        assert type_ == T["REGISTER"]
        self.conn.sendall(frame("REGISTER_ACK", {"result": 0, "message": "ok"}))

    def read_frame(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= nat.FRAME_HEADER_SIZE:
                length = struct.unpack_from("<I", self.buffer, 16)[0]
                total = nat.FRAME_HEADER_SIZE + length
                if len(self.buffer) >= total:
                    data, self.buffer = self.buffer[:total], self.buffer[total:]
                    return nat.decode_frame(data)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.conn.settimeout(left)
            try:
                chunk = self.conn.recv(65536)
            except socket.timeout:
                return None
            assert chunk, "processor closed the connection"
            self.buffer += chunk

    def replies(self, window):
        """Action replies received within `window` seconds (heartbeats and status skipped)."""
        out, deadline = [], time.monotonic() + window
        while time.monotonic() < deadline:
            got = self.read_frame(timeout=max(0.01, deadline - time.monotonic()))
            if got and got[0] == T["ACTION_REPLY"]:
                out.append((got[1], nat.decode_message(T["ACTION_REPLY"], got[2])))
        return out

    def send_action(self, seq, name, step=7):
        self.conn.sendall(frame("ACTION", {"kind": nat.ACTION_KINDS[name], "step": step}, seq))

    def close(self):
        if self.conn:
            self.conn.close()
        self.server.close()


def test_replayed_action_is_executed_once_and_answered_from_cache(monkeypatch):
    monkeypatch.setenv("MINDIO_HEARTBEAT_INTERVAL", "0.1")
    fake = ScriptedController()
    processor = nat.Processor(0, 1)
    calls = []
    processor.set_dispatcher(lambda action: (calls.append((action["name"], action["step"])), (0, "ok"))[1])
    try:
        processor.start("127.0.0.1", fake.port)
        fake.thread.join(timeout=5)
        fake.send_action(10, "rollback")
        assert fake.replies(0.5) == [(10, {"rank": 0, "kind": nat.ACTION_KINDS["rollback"], "result": 0,
                                           "message": "ok"})]
        fake.send_action(10, "rollback")  # a resend: answered from the cache, not run again
        assert [seq for seq, _ in fake.replies(0.5)] == [10]
        fake.send_action(9, "stop")  # older than the last: dropped
        assert fake.replies(0.5) == []
        fake.send_action(11, "rollback", step=8)
        assert [seq for seq, _ in fake.replies(0.5)] == [11]
        assert calls == [("rollback", 7), ("rollback", 8)]
        stats = processor.stats()
        assert stats["duplicates"] == 1 and stats["stale_dropped"] == 1 and stats["executed_rollback"] == 2
    finally:
        processor.stop()
        fake.close()


def test_handler_errors_are_replied_with_rank_and_action(monkeypatch):
    monkeypatch.setenv("MINDIO_HEARTBEAT_INTERVAL", "0.1")
    fake = ScriptedController()
    tp.tft_init_processor(0, 1, enable_tls=False)
    try:
        def broken_rollback(step, args, ctx):
            raise ValueError(f"cannot roll back to {step}")

        tp.tft_register_rollback_handler(broken_rollback)
        tp.tft_start_processor("127.0.0.1", fake.port)
        fake.thread.join(timeout=5)
        fake.send_action(1, "rollback", step=4)
        (seq, reply), = fake.replies(1.0)
        assert seq == 1 and reply["result"] == 1
        assert "rank 0 action rollback" in reply["message"]
        assert "ValueError: cannot roll back to 4" in reply["message"]
        tp._handlers.pop("clean", None)
        fake.send_action(2, "clean")
        (_, reply), = fake.replies(1.0)
        assert reply["result"] == 1
        assert reply["message"] == "rank 0 action clean: no handler registered (tft_register_clean_handler)"
    finally:
        tp.tft_destroy_processor()
        tp._handlers.clear()
        fake.close()
