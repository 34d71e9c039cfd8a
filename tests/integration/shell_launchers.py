"""Launchers of a two-node job on this machine, with shell workers (no torch), for the node-loss tests:
each worker start appends "rank restarted workers'-store-port pid" to OUT/starts, then waits (bounded) for
OUT/finish. A node is lost by SIGKILLing its launcher and every worker it started."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from torch.distributed.elastic.utils.distributed import get_free_port

REPO = Path(__file__).resolve().parent.parent.parent
LAUNCH = [sys.executable, "-m", "mindio_adaptor.launch"]
LOST_AFTER_S = 1.0
TIMEOUT_S = 60
WORKER = ['--no-python', 'sh', '-c', 'echo "$RANK $MINDIO_RESTARTED $MASTER_PORT $$" >> "$OUT/starts"; i=0; '
          'while [ ! -e "$OUT/finish" ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done']


class Cluster:
    def __init__(self, tmp_path):
        port = get_free_port()
        self.out, self.port = tmp_path, port
        self.env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=os.pathsep.join(
            p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p))
        self.common = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                       "--rdzv-id", "node-loss", "--worker-reboot", "--node-lost-after", str(LOST_AFTER_S)]
        self.launchers = []
        self.logs = {}  # pid -> the log file of a launcher started with logged=True

    def start(self, *flags, worker=WORKER, logged=False):
        """A launcher; `logged`: its log goes to a file that wait_for_line reads while it runs."""
        log = (self.out / f"launcher{len(self.launchers)}.log").open("w") if logged else None
        proc = subprocess.Popen([*LAUNCH, *self.common, *flags, *worker], env=self.env,
                                stderr=log or subprocess.PIPE, text=True)
        if log:
            self.logs[proc.pid] = Path(log.name)
            log.close()
        self.launchers.append(proc)
        return proc

    def log_of(self, proc):
        return self.logs[proc.pid].read_text() if proc.pid in self.logs else proc.stderr.read()

    def logged_lines(self):
        return "\n\n".join(f"launcher pid {pid}:\n{path.read_text()}" for pid, path in self.logs.items())

    def wait_for_line(self, proc, text):
        deadline = time.monotonic() + TIMEOUT_S
        while text not in self.log_of(proc):
            assert time.monotonic() < deadline and proc.poll() is None, f"{text!r} never logged: {self.log_of(proc)}"
            time.sleep(0.1)

    def starts(self):
        path = self.out / "starts"
        rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
        return [(int(rank), restarted, port, int(pid)) for rank, restarted, port, pid in rows]

    def wait_starts(self, count, *running):
        deadline = time.monotonic() + TIMEOUT_S
        while len(self.starts()) < count:
            assert time.monotonic() < deadline, f"only {self.starts()} started\n{self.logged_lines()}"
            assert all(p.poll() is None for p in running), [p.poll() for p in self.launchers]
            time.sleep(0.1)
        return self.starts()

    def lose_node(self, launcher):
        """SIGKILL a launcher and every worker it started (each leads its own process group)."""
        workers = psutil.Process(launcher.pid).children()
        launcher.send_signal(signal.SIGKILL)
        for worker in workers:
            os.killpg(worker.pid, signal.SIGKILL)
        launcher.wait(timeout=10)

    def finish(self, *launchers):
        (self.out / "finish").touch()
        try:
            return [(p.wait(timeout=TIMEOUT_S), self.log_of(p)) for p in launchers]
        except subprocess.TimeoutExpired:
            running = [p for p in launchers if p.poll() is None]
            self.stop()
            raise AssertionError("launchers still running after the finish: " + "\n\n".join(
                f"pid {p.pid}:\n{self.log_of(p)}" for p in running)) from None

    def stop(self):
        for proc in self.launchers:
            if proc.poll() is None:
                for child in psutil.Process(proc.pid).children():
                    os.killpg(child.pid, signal.SIGKILL)
                proc.kill()
                proc.wait(timeout=10)
