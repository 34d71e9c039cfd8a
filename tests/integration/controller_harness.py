"""A controller (in the test process, through the reference API) and N real processor processes
(controller_worker.py) on localhost, with every wait bounded."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from mindio_adaptor.ttp import controller as ctl

WORKER = Path(__file__).with_name("controller_worker.py")
REPO = Path(__file__).resolve().parents[2]
HEARTBEAT_S = 0.2


def in_process_job(world_size, enable_arf=False):
    """A standalone controller and `world_size` native processors in this process, each answering every action
    with success and reporting a layout of two instances (R=2); the processors once the job is NORMAL."""
    from mindio_adaptor import _native as nat

    ctl.tft_init_controller(-1, world_size, enable_arf=enable_arf)
    port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
    processors = []
    for rank in range(world_size):
        p = nat.Processor(rank, world_size)
        p.set_dispatcher(lambda action: (0, ""))
        p.start("127.0.0.1", port)
        p.set_replica(rank, [{"optimizer_type": 0, "replica_cnt": 2, "replica_shift": 0,
                              "rank_list": list(range(world_size))}])
        processors.append(p)
    wait_until(lambda: ctl.controller_state() == "NORMAL", 5, "all ranks registered")
    return processors


def end_in_process_job(processors):
    for p in processors:
        p.stop()
    ctl.tft_destroy_controller()


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Job:
    def __init__(self, tmp_path, world_size, env=None, policy=None, policy_timeout_s=5.0, heartbeat_s=HEARTBEAT_S,
                 enable_arf=False, enable_scale_in=False, worker=WORKER, **worker_args):
        self.world_size = world_size
        self.worker = worker
        self.tmp_path = Path(tmp_path)
        self.trigger = self.tmp_path / "trigger"
        self.records = {r: [] for r in range(world_size)}
        self.lock = threading.Lock()
        ctl.tft_init_controller(-1, world_size, enable_arf=enable_arf, enable_scale_in=enable_scale_in)
        if policy is not None:
            ctl.tft_set_fault_policy(policy, timeout_s=policy_timeout_s)
        self.port = ctl.tft_start_controller("127.0.0.1", 0, enable_tls=False)
        path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)
        self.worker_env = dict(os.environ, MINDIO_HEARTBEAT_INTERVAL=str(heartbeat_s), PYTHONPATH=path, **(env or {}))
        self.worker_args = dict(worker_args, enable_arf=int(enable_arf))
        self.procs = {}
        self.retired = []  # processes replaced by spawn(), kept to be reaped
        for rank in range(world_size):
            self.spawn(rank)

    def spawn(self, rank, restarted=False, track=True, **overrides):
        """Start the worker process of `rank`; `restarted`: as a launcher restarts a dead rank (ARF);
        `track=False`: an extra process for that rank (its output is recorded, it is not the rank's)."""
        args = [sys.executable, str(self.worker), "--rank", str(rank), "--world-size", str(self.world_size),
                "--port", str(self.port), "--trigger", str(self.trigger)]
        for key, value in dict(self.worker_args, **overrides).items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        env = dict(self.worker_env, MINDIO_RESTARTED="1" if restarted else "0")
        suffix = f".{len(self.retired)}" if rank in self.procs else ""
        log = open(self.tmp_path / f"worker{rank}{suffix}.log", "w")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
        if not track:
            self.retired.append(proc)
        elif rank in self.procs:
            self.retired.append(self.procs[rank])
        if track:
            self.procs[rank] = proc
        threading.Thread(target=self._read, args=(rank, proc), daemon=True).start()
        return proc

    def _read(self, rank, proc):
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.records[rank].append(event)

    def events_of(self, rank, key=None):
        with self.lock:
            return [e for e in self.records[rank] if key is None or key in e]

    def handler_calls(self, rank, handler):
        return [e["args"] for e in self.events_of(rank, "handler") if e["handler"] == handler]

    def wait_ready(self, timeout=20):
        def ready():
            early = [r for r, p in self.procs.items() if p.poll() is not None]
            if early:
                raise AssertionError(f"workers {early} exited early:\n{self.worker_logs()}")
            return all(self.events_of(r, "ready") for r in range(self.world_size))
        wait_until(ready, timeout, "every worker to finish its first steps")
        # Generous: on a loaded 2-core host the controller's thread may wait a while for a core.
        wait_until(lambda: ctl.controller_state() == "NORMAL", 15, "the controller to reach NORMAL")

    def fire(self):
        self.trigger.write_text("go")

    def controller_events(self, kind=None):
        return [(t, k, d) for t, k, d in ctl.controller_events() if kind is None or k == kind]

    def wait_results(self, ranks, timeout=20):
        wait_until(lambda: all(self.events_of(r, "result") for r in ranks), timeout, f"results of ranks {ranks}")
        return {r: self.events_of(r, "result")[-1] for r in ranks}

    def close(self):
        for proc in list(self.procs.values()) + self.retired:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        ctl.tft_destroy_controller()

    def worker_logs(self):
        return "\n".join(f"--- {path.name}\n" + path.read_text()[-2000:]
                         for path in sorted(self.tmp_path.glob("worker*.log")))


def actions_in_order(job):
    """The names of the actions the controller sent, in order."""
    return [d.split(" ")[0] for _, _, d in job.controller_events("action")]


# ---- frames by hand, for the tests of the wire under abuse ------------------------------------------

def frame(type_name, message, seq=0):
    from mindio_adaptor import _native as nat

    kind = nat.MSG_TYPES[type_name]
    return nat.encode_frame(kind, seq, nat.encode_message(kind, message))


def register_frame(token, rank=0, world_size=4):
    return frame("REGISTER", {"rank": rank, "world_size": world_size, "heartbeat_ms": 200, "token": token})


def read_until_closed(sock, timeout, what):
    """Everything the controller sent until it closed the connection; fails naming `what` if it kept it open."""
    import socket

    sock.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        except socket.timeout:
            break
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the controller kept {what} open")


# ---- a network partition between some ranks and their controller --------------------------------------

class Partition:
    """A TCP relay in front of a controller, for ranks on one side of a network partition: give them
    ("127.0.0.1", partition.port) as the controller's address. Until `cut()` it forwards both ways. `cut()`
    resets the connections it carries on the ranks' side (the controller's side just falls silent), and from
    then on it accepts every new connection and never answers: the controller is alive but unreachable, which
    the ranks see as a timeout, never as a refused connection (no proof that its process is gone)."""

    def __init__(self, target_port, host="127.0.0.1"):
        import socket

        self.target = (host, target_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.is_cut = threading.Event()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.relayed = []  # (ranks' side, controller's side)
        self.held = []     # connections accepted after the cut, never answered
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket

        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut.is_set():
                    self.held.append(conn)
                    continue
                upstream = socket.create_connection(self.target, timeout=5)
                self.relayed.append((conn, upstream))
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        import socket

        src.settimeout(0.1)
        while not self.is_cut.is_set() and not self.closed.is_set():
            try:
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data or self.is_cut.is_set():
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self):
        import socket
        import struct

        with self.lock:
            self.is_cut.set()
            for ranks_side, _ in self.relayed:
                try:  # RST, as a host's stack does when a connection's retransmissions run out
                    ranks_side.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    ranks_side.close()
                except OSError:
                    pass

    def refuse(self):
        """The address refuses connections from now on, as when the controller behind it ended (after the cut:
        as a job that ended, or a leader that died, while the ranks were cut off)."""
        self.listener.close()

    def close(self):
        self.closed.set()
        self.listener.close()
        with self.lock:
            for sock in [s for pair in self.relayed for s in pair] + self.held:
                try:
                    sock.close()
                except OSError:
                    pass
