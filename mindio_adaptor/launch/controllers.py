"""Recovery controllers hosted by the launchers (`--controllers K`), so that no training process and no
single node carries the only controller.

Nodes 0..K-1 each run one `mindio-adaptor controller` as a child process of their launcher: node 0's is
the active one (term 1), the others are backups in node order (docs/controller.md, "Backups, terms and
failure domains"). Each launcher is its own node, so no two controllers share a failure domain. Each
publishes its address in the launchers' store (sealed: core/job/sealed_values); every launcher gives its
workers the whole list, in node order, as MINDIO_CONTROLLER_ADDR, and the job's token as MINDIO_TOKEN (each
launcher holds it: launch/job_token; it never passes through the store). Killing the active controller's process leaves training running: the processors register
with the next controller of the list, which takes over.

A controller process that dies is not started again. Back on its port it would be an idle backup ahead
of the new leader in every processor's list, and a process that registers for the first time (a
replacement) could reach it first; the controller refuses such a registration (term 0 never makes a
backup take over), but a list that only grows shorter keeps the leader easy to find. With K
controllers the job survives K-1 losses of the leading one.

A group restart gives the job new controllers, as it gives it a new workers' store. The old ones are in the
old generation's recovery (a replacement that never came, say): each counted every survivor the restart
stopped as one more fault, and ended the job, which then was never restarted; and the new generation's
processes met controllers that had ended or led nothing. So every hosting launcher stops its controller
first and says so under the new generation; every launcher stops its workers only when all hosting nodes
have said so (bounded: a lost node never does), so that no controller acts on the stop; each hosting
launcher then starts a new controller, whose address is published under the new generation.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Dict, List, Optional

from mindio_adaptor.core.detection.exit_codes import describe
from mindio_adaptor.core.job.controller_address import ENV_CONTROLLER, ENV_TOKEN
from mindio_adaptor.core.job.tls_config import TlsConfig
from mindio_adaptor.launch.config import LaunchConfig

START_TIMEOUT_S = 60.0  # a controller process imports the native module and listens within this
STOP_GRACE_S = 10.0
# How long a group restart waits for every hosting node to stop its controller: each follows the new generation
# within its --monitor-interval and stops its controller within STOP_GRACE_S; a lost node never answers.
STAND_DOWN_WAIT_S = 2 * STOP_GRACE_S


def controller_key(node: int, generation: int) -> str:
    return f"generation/{generation}/controller/{node}"


def _stood_down_key(node: int, generation: int) -> str:
    return f"generation/{generation}/controller/{node}/stood_down"  # node's controller of earlier generations stopped


class ControllerStartError(RuntimeError):
    """This node's controller process did not start listening (the message says what it printed)."""


def reachable_host(config: LaunchConfig) -> str:
    """The address the other nodes reach this one at: loopback when the job runs on this host alone, else this
    host's address on the route to node 0. Not the host name's address: on many hosts (Debian's /etc/hosts) it is
    127.0.1.1, and a lifeline published there made a watcher on another host take a refused connection to its own
    loopback for proof that a healthy node was gone (seen with each node in a network namespace of its own)."""
    master = socket.gethostbyname(config.master_addr)
    if master.startswith("127."):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master, config.master_port or 9))  # a datagram socket's connect only picks the route
        return probe.getsockname()[0]


class HostedController:
    """The controller process of this node (only on nodes below --controllers)."""

    def __init__(self, config: LaunchConfig, store, log):
        self.config, self.store, self.log = config, store, log
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.joined_generation: Optional[int] = None  # the generation this launcher started into

    @property
    def hosted(self) -> bool:
        """Nodes below --controllers, a launcher that replaced such a node included: it hosts the lost
        node's slot again, a backup on a new port, which the survivors adopt when its workers join
        (core/job/rehosted_slot). Without it a second loss of the leading controller's node would end the job."""
        return self.config.node_rank < self.config.controllers

    @property
    def rehosts(self) -> bool:
        """This launcher replaced a lost controller-hosting node and hosts its slot again."""
        return self.hosted and self.store.ownership.replacing

    def start(self, generation: int) -> None:
        """Start this node's controller for `generation` and publish its address (node 0 first chooses the
        token). A replacement's is a backup whatever its node, in the generation it joined: the job already
        has a leader there. A later generation's controllers are all new, node 0's the active one."""
        if self.joined_generation is None:
            self.joined_generation = generation
        if not self.hosted:
            return
        hosting_again = self.rehosts and generation == self.joined_generation  # the lost node's slot, in its job
        backup = self.config.node_rank > 0 or hosting_again
        self.proc = subprocess.Popen(self._command(backup), env={**os.environ, ENV_TOKEN: self.store.token},
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.port = self._listening_port()
        threading.Thread(target=self._forward_output, daemon=True).start()
        self.store.store.set(controller_key(self.config.node_rank, generation),
                             f"{reachable_host(self.config)}:{self.port}")
        self.log.info("%s controller started as pid %d on port %d%s%s%s", "backup" if backup else "active",
                      self.proc.pid, self.port, f" for generation {generation}" if generation else "",
                      f", slot {self.config.node_rank} of the list hosted again (the lost node's)"
                      if hosting_again else "",
                      ", its link TLS 1.3 with the job's certificate" if TlsConfig.from_env() else "")

    def _command(self, backup: bool) -> List[str]:
        cfg = self.config
        return [sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size", str(cfg.world_size),
                "--host", "0.0.0.0", "--port", "0", *(["--backup"] if backup else []),
                *(["--arf"] if cfg.worker_reboot else []), *([] if cfg.online_repair else ["--no-uce"]),
                *(["--elastic"] if cfg.elastic_training else [])]

    def _listening_port(self) -> int:
        """The port from the controller's first line ("... listening on HOST:PORT ..."), bounded."""
        line: List[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        text = line[0] if line else ""
        if "listening on " not in text:
            self.stop()
            raise ControllerStartError(f"node {self.config.node_rank}'s controller did not start within "
                                       f"{START_TIMEOUT_S:.0f} s: {text.strip() or 'no output'}")
        return int(text.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])

    def _forward_output(self) -> None:
        proc = self.proc
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()

    def check(self) -> None:
        """Say once that this node's controller process ended while the node lives (see the module's doc)."""
        if self.proc is None or self.proc.poll() is None:
            return
        self.log.info("this node's controller (pid %d) ended: %s; the processors follow the next of the list; "
                      "it is not started again", self.proc.pid, describe(self.proc.returncode))
        self.proc = None

    def stand_down(self, generation: int) -> None:
        """A group restart into `generation`: stop this node's controller of the earlier one (where it hosts
        one), say so, and wait until every hosting node has (bounded by STAND_DOWN_WAIT_S). Every launcher
        waits, hosting or not, before it stops its workers: a controller still running would count each
        stopped rank as a fault and end the job."""
        if not self.config.controllers:
            return
        if self.hosted:
            pid = self.proc.pid if self.proc else None
            self.stop()
            self.store.store.set(_stood_down_key(self.config.node_rank, generation), "1")
            self.log.info("group restart: this node's controller of the earlier generation %s",
                          f"(pid {pid}) stopped" if pid else "had ended already")
        keys = [_stood_down_key(node, generation) for node in range(self.config.controllers)]
        deadline = time.monotonic() + STAND_DOWN_WAIT_S
        while not self.store.store.check(keys) and time.monotonic() < deadline:
            time.sleep(self.config.monitor_interval)
        missing = [node for node, key in enumerate(keys) if not self.store.store.check([key])]
        if missing:
            self.log.info("group restart: nodes %s did not say within %.0f s that their controller stopped; "
                          "going on", missing, STAND_DOWN_WAIT_S)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_GRACE_S)


def controllers_env(config: LaunchConfig, store, generation: int) -> Dict[str, str]:
    """What every worker of `generation` gets when the launchers host the controllers: the list in node order
    (waits, bounded by the rendezvous timeout, for every hosting node to publish)."""
    if not config.controllers:
        return {}
    keys = [controller_key(node, generation) for node in range(config.controllers)]
    store.store.wait(keys, timedelta(seconds=config.rdzv_timeout))
    return {ENV_CONTROLLER: ",".join(store.store.get(key).decode() for key in keys)}



def controllers_keys(env: Dict[str, str], generation: int) -> Dict[str, str]:
    """The launchers' store keys that `env` (what controllers_env returned for `generation`) was read from: what
    a launcher writes back into the fresh store of a new node 0, which then gives its workers the same list."""
    if not env:
        return {}
    addresses = env[ENV_CONTROLLER].split(",")
    return {controller_key(node, generation): address for node, address in enumerate(addresses)}
