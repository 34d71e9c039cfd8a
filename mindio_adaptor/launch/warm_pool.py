"""The launcher's warm workers (launch/warm_worker.py): started ahead, handed to a rank when one is needed,
refilled after each hand-out, closed (EOF on stdin) when the launcher ends."""
from __future__ import annotations

import subprocess
import sys
from typing import Dict, List, Optional

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.layout.warm_assignment import ENV_WARM_RANK
from mindio_adaptor.launch import forked_workers
from mindio_adaptor.launch.config import LaunchConfig
from mindio_adaptor.launch.warm_worker import ADAPTOR_PATCHES
from mindio_adaptor.launch.worker import KILL_WAIT_S
from mindio_adaptor.launch.worker_env import worker_env

# The script's flag that says it is a Megatron script under the adaptor's worker reboot: the only kind a warm
# worker runs ahead of its rank (patches/warm_spare knows where it must stop and wait).
WORKER_REBOOT_FLAG = "--enable-worker-reboot"


def script_argv(config: LaunchConfig) -> Optional[List[str]]:
    """The script's command line as a warm worker runs it (`script args` or `-m module args`); None for a
    program started without Python (--no-python), which no warm worker can become."""
    return forked_workers.script_argv(config.command)


def preloading_env(config: LaunchConfig) -> Dict[str, str]:
    """The environment of a replacement of local rank 0, for a process that imports ahead of its rank (a warm
    worker, the worker template): what the preloaded modules may read at import. No RANK and no job token: the
    rank's own environment replaces it when the process becomes a worker."""
    env = worker_env(config, 0, master_port=0, restart_count=0, restarted=True, token="")
    env.pop("RANK", None)
    env.pop(ENV_TOKEN, None)
    return env


def runs_ahead(config: LaunchConfig) -> bool:
    """Whether warm workers run the script ahead, as a stand-in rank (launch/warm_worker.py --ahead)."""
    argv = script_argv(config)
    return bool(argv) and WORKER_REBOOT_FLAG in argv and ADAPTOR_PATCHES in config.warm_preload


class WarmPool:
    def __init__(self, config: LaunchConfig, size: int):
        self.config = config
        self.size = size if script_argv(config) is not None else 0
        self.ready: List[subprocess.Popen] = []

    def fill(self) -> List[int]:
        """Start warm workers up to the pool's size; their pids."""
        self.ready = [p for p in self.ready if p.poll() is None]
        started = []
        while len(self.ready) < self.size:
            # Ahead, the script runs as rank 1 until it is handed out: not rank 0, which hosts things and prints
            # for the job, and any other rank is as good (with data parallelism alone every rank's model is
            # the same; patches/warm_spare).
            env = preloading_env(self.config)
            command = [sys.executable, "-u", "-m", "mindio_adaptor.launch.warm_worker", self.config.warm_preload]
            if runs_ahead(self.config):
                env[ENV_WARM_RANK] = str(min(1, self.config.world_size - 1))
                command += ["--ahead", *script_argv(self.config)]
            proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, text=True, start_new_session=True)
            self.ready.append(proc)
            started.append(proc.pid)
        return started

    def take(self) -> Optional[subprocess.Popen]:
        """A live warm worker, out of the pool (None when there is none)."""
        while self.ready:
            proc = self.ready.pop(0)
            if proc.poll() is None:
                return proc
        return None

    def close(self) -> None:
        for proc in self.ready:
            try:
                proc.stdin.close()  # EOF: the warm worker ends by itself
            except OSError:
                pass
        for proc in self.ready:
            try:
                proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:  # still importing: no reason to wait for that
                proc.kill()
                proc.wait(timeout=KILL_WAIT_S)
        self.ready = []
