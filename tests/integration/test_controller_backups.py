"""Processors that know the controller's backups: when the controller they registered with is lost
(SIGKILL of its process: no goodbye), each moves to the next controller of the list and registers there,
with its rank's state, while training goes on; a backup that ranks register with leads the job under the
next term, and a controller of an older term that comes back is refused and stands down. Real
controllers in their own processes, real sockets."""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from controller_harness import wait_until
from mindio_adaptor.core.processor_link import ProcessorLink

TOKEN = "backup-test-token"


@pytest.fixture
def env(monkeypatch):
    for key, value in {"MINDIO_TOKEN": TOKEN, "MINDIO_HEARTBEAT_INTERVAL": "0.2", "TTP_RETRY_TIMES": "5"}.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def start_controller(env, world_size, *flags, port=0, log=None):
    process = subprocess.Popen([sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size",
                                str(world_size), "--port", str(port), "--host", "127.0.0.1", *flags], env=env,
                               stdout=subprocess.PIPE, stderr=log or subprocess.PIPE, text=True)
    line = process.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    assert match, (line, process.stderr.read() if process.poll() is not None else "")
    return process, int(match.group(1))


def test_a_lost_controller_is_followed_by_the_next_of_the_list(env, capfd):
    (active, active_port), (backup, backup_port) = start_controller(env, 2), start_controller(env, 2, "--backup")
    links = [ProcessorLink(rank, 2) for rank in (0, 1)]
    try:
        for link in links:
            link.start("127.0.0.1", active_port, backups=[("127.0.0.1", backup_port)])
            link.report_layout(link.rank, [{"rank_list": [0, 1], "replica_cnt": 2}], f"host/node{link.rank}")
            link.update_ended(3)
        assert [link.controller_address() for link in links] == [f"127.0.0.1:{active_port}"] * 2
        assert [link.controller_term() for link in links] == [1, 1]
        active.send_signal(signal.SIGKILL)
        active.wait(timeout=10)
        wait_until(lambda: all(link.controller_address() == f"127.0.0.1:{backup_port}" and link.connected()
                               for link in links), 30, "both ranks registered with the backup")
        assert [link.controller_term() for link in links] == [2, 2]  # the backup took over
        for link in links:  # the backup hears the ranks' progress from now on
            link.update_started(3)
            link.update_ended(4)
        err = capfd.readouterr().err
        assert f"trying the next controller of the list, 127.0.0.1:{backup_port} (a backup)" in err
        assert f"registered with the controller at 127.0.0.1:{backup_port} (term 2)" in err
    finally:
        stop(links, active, backup)


def stop(links, *processes):
    for link in links:
        link.native.stop()
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def test_a_controller_of_an_older_term_that_comes_back_is_refused_and_stands_down(env, tmp_path, capfd):
    (first, first_port), (backup, backup_port) = start_controller(env, 1), start_controller(env, 1, "--backup")
    link = ProcessorLink(0, 1)
    returned = None
    try:
        link.start("127.0.0.1", first_port, backups=[("127.0.0.1", backup_port)])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        wait_until(lambda: link.controller_term() == 2 and link.connected(), 30, "the backup leading as term 2")
        with open(tmp_path / "returned.log", "w") as log:  # the first controller again, at its address
            returned, _ = start_controller(env, 1, port=first_port, log=log)
        backup.send_signal(signal.SIGKILL)  # the rank's only way back is the returned term-1 controller
        backup.wait(timeout=10)
        wait_until(lambda: "was replaced by a controller of term 2" in (tmp_path / "returned.log").read_text(), 30,
                   "the returned controller standing down")
        assert "it no longer acts, and closes its connections" in (tmp_path / "returned.log").read_text()
        assert link.controller_term() == 2
        err = capfd.readouterr().err
        assert "the controller is not the job's: this controller (term 1) was replaced by one of term 2" in err
    finally:
        stop([link], first, backup, *([returned] if returned is not None else []))


def test_a_process_that_never_registered_does_not_make_a_backup_take_over(env, capfd):
    # A replacement (or a first start) that reaches an idle backup before the leader: refused as "not the
    # job's controller", it goes on to the next of its list; the backup stays idle (no second leader).
    (active, active_port), (backup, backup_port) = start_controller(env, 1), start_controller(env, 1, "--backup")
    link = ProcessorLink(0, 1)
    try:
        link.start("127.0.0.1", backup_port, backups=[("127.0.0.1", active_port)])
        assert link.controller_address() == f"127.0.0.1:{active_port}" and link.controller_term() == 1
        err = capfd.readouterr().err
        assert "a backup controller that leads no job yet: this process never registered (term 0)" in err
        assert "taking over" not in err
    finally:
        stop([link], active, backup)


def test_a_list_that_names_no_live_controller_is_an_error_naming_the_last_one_tried(env):
    links = ProcessorLink(0, 1)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"could not register with the controller at 127\.0\.0\.1:\d+ after 10 "
                                         r"attempts"):
        links.start("127.0.0.1", 1, backups=[("127.0.0.1", 2)])
    assert time.monotonic() - started < 60


class ScriptedController:
    """A listener that answers each registration with a RegisterAck of the next term of `terms` (a
    controller of another build, say, that does not fence itself), then closes the connection."""

    def __init__(self, terms):
        from mindio_adaptor import _native as nat

        self.nat, self.terms, self.registers = nat, list(terms), []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        nat, types = self.nat, self.nat.MSG_TYPES
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                header = conn.recv(24, socket.MSG_WAITALL)
                length = int.from_bytes(header[16:20], "little")
                body = conn.recv(length, socket.MSG_WAITALL) if length else b""
                _, _, register = nat.decode_frame(header + body)
                self.registers.append(nat.decode_message(types["REGISTER"], register))
                term = self.terms[min(len(self.registers), len(self.terms)) - 1]
                ack = {"result": 0, "message": "ok", "replacement": False, "term": term}
                conn.sendall(nat.encode_frame(types["REGISTER_ACK"], 0, nat.encode_message(types["REGISTER_ACK"], ack)))
                time.sleep(0.3)

    def close(self):
        self.listener.close()


def test_a_processor_refuses_a_controller_older_than_one_it_registered_under(env, capfd):
    controller = ScriptedController(terms=[2, 1])  # a takeover, then the replaced controller answers
    link = ProcessorLink(0, 1)
    try:
        link.start("127.0.0.1", controller.port)
        assert link.controller_term() == 2
        wait_until(lambda: len(controller.registers) >= 3, 30, "the processor retrying after the refusal")
        assert [r["term"] for r in controller.registers[:3]] == [0, 2, 2]  # it says the term it knows
        assert link.controller_term() == 2
        err = capfd.readouterr().err
        assert (f"the controller at 127.0.0.1:{controller.port} has term 1, older than term 2 this rank registered "
                f"under: it was replaced, and is refused") in err
    finally:
        link.native.stop()
        controller.close()
