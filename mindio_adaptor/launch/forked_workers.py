"""The launcher's side of the worker template (launch/worker_template): start it, ask it for a worker, and hold
the forked worker as this process's own child.

The worker is forked by the template's middle process, which exits at once; while this process is a child
subreaper (prctl PR_SET_CHILD_SUBREAPER) the kernel gives the orphan to it rather than to init, so the launcher
waits for it, reads its exit status and signals it as it would a process it started itself. The flag is on only
while a worker is being forked: any other orphan of the launcher's descendants still goes to init, as without it.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Mapping, Optional, Sequence

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
TEMPLATE_MODULE = "mindio_adaptor.launch.worker_template"
# A worker is asked for before the template finished its imports: waiting for them costs no more than the
# worker importing them itself; past this the template is taken as broken and the worker is started plainly.
TEMPLATE_WAIT_S = 120.0
POLL_S = 0.01


def _child_subreaper(on: bool) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def script_argv(command: Sequence[str]) -> Optional[list]:
    """The script's command line (`script args` or `-m module args`) of `python -u ...`; None for any other
    program, which no template can become."""
    command = [str(part) for part in command]
    if command[:2] != [sys.executable, "-u"] or len(command) < 3:
        return None
    return command[2:]


class ForkedWorker:
    """A worker the template forked and this process adopted: the part of subprocess.Popen a launcher uses."""

    def __init__(self, pid: int, args: Sequence[str]):
        self.pid, self.args = pid, list(args)
        self.returncode: Optional[int] = None
        self.stdin = self.stdout = self.stderr = None
        self._lock = threading.Lock()

    def poll(self) -> Optional[int]:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: its status is lost, as subprocess takes it
                    pid, status = self.pid, 0
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(POLL_S)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WorkerTemplate:
    def __init__(self, preload: str, env: Mapping[str, str]):
        request_reader, self._requests = os.pipe()
        self._replies, reply_writer = os.pipe()
        self._lock = threading.Lock()
        _child_subreaper(True)  # the template must be forked under it for its orphans to find this process
        try:
            self.proc = subprocess.Popen([sys.executable, "-u", "-m", TEMPLATE_MODULE, preload, str(request_reader),
                                          str(reply_writer)], env=dict(env), pass_fds=(request_reader, reply_writer))
        finally:
            _child_subreaper(False)
            os.close(request_reader)
            os.close(reply_writer)
        self._reply_buffer = b""

    def spawn(self, command: Sequence[str], env: Mapping[str, str], stdout: Optional[str] = None,
              stderr: Optional[str] = None) -> Optional[ForkedWorker]:
        """The worker running `command` (python -u ...) forked from the template; None when the template cannot
        give one (another program, the template ended or hung): the caller starts the process itself."""
        argv = script_argv(command)
        if argv is None or self._requests < 0:
            return None
        request = json.dumps({"env": dict(env), "argv": argv, "stdout": stdout, "stderr": stderr}) + "\n"
        with self._lock:
            _child_subreaper(True)
            try:
                os.write(self._requests, request.encode())
                reply = self._read_reply(TEMPLATE_WAIT_S)
            except OSError:
                reply = None
            finally:
                _child_subreaper(False)
            if reply is None:
                self.close()
                return None
        return ForkedWorker(json.loads(reply)["pid"], command)

    def _read_reply(self, timeout: float) -> Optional[bytes]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._reply_buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                return None
            chunk = os.read(self._replies, 4096)
            if not chunk:  # the template ended
                return None
            self._reply_buffer += chunk
        line, _, self._reply_buffer = self._reply_buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """EOF ends the template; one that hangs is killed."""
        if self._requests >= 0:
            os.close(self._requests)
            os.close(self._replies)
            self._requests = -1
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
