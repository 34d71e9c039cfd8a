"""Hosts on one machine, each a network namespace of its own with an address on a private bridge, made by the test
and removed after it (needs root and iproute2). A host can vanish (its link taken down at the bridge: its processes
keep running, its peers get no FIN and no RST, as after a power or NIC loss), come back, or be cut off from some
peers and not others (blackhole routes on both sides: packets between them are dropped).

The bridge lives in a namespace of its own with no other link, so nothing the hosts send leaves the machine.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict, List, Sequence

JOB_TOKEN = "netns-hosts-job-token"  # as an operator gives every node of a job the same MINDIO_TOKEN
SUBNET = "10.213.0"  # only inside the namespaces made here; the root namespace never routes it


def available() -> str:
    """Empty when namespaces can be made here, else why not (for a skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    probe = f"mio-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class NetnsHosts:
    """`hosts = NetnsHosts(3)`; `hosts.address(i)`; `hosts.popen(i, argv, ...)`; `hosts.vanish(i)`; `hosts.close()`."""

    def __init__(self, count: int):
        tag = f"{os.getpid() % 100000}"
        self.hub = f"mio{tag}-hub"
        self.names = [f"mio{tag}-h{i}" for i in range(count)]
        self._made: List[str] = []
        try:
            self._make(count)
        except Exception:
            self.close()
            raise

    def _make(self, count: int) -> None:
        _ip("netns", "add", self.hub)
        self._made.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            _ip("netns", "add", name)
            self._made.append(name)
            # both ends are made in the host's namespace and one is moved to the hub: no name in the root namespace
            _ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", f"port{i}", "netns", self.hub)
            _ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", self.hub, "link", "set", f"port{i}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"port{i}", "up")

    def address(self, host: int) -> str:
        return f"{SUBNET}.{host + 1}"

    def command(self, host: int, argv: Sequence[str]) -> List[str]:
        return ["ip", "netns", "exec", self.names[host], *argv]

    def popen(self, host: int, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def environment(self, host: int) -> Dict[str, str]:
        """What a process on the host needs: to name its own interface (gloo's choice of address), and the
        job's token, which launchers whose store is beyond loopback must be given (launch/job_token)."""
        return {"GLOO_SOCKET_IFNAME": "eth0", "MINDIO_TOKEN": JOB_TOKEN}

    def vanish(self, host: int) -> None:
        """The host's link goes down at the bridge: its processes run on, nobody hears from them."""
        _ip("-n", self.hub, "link", "set", f"port{self._index(host)}", "down")

    def come_back(self, host: int) -> None:
        _ip("-n", self.hub, "link", "set", f"port{self._index(host)}", "up")

    def cut(self, a: int, b: int) -> None:
        """Hosts a and b no longer reach each other; both still reach everyone else."""
        _ip("-n", self.names[a], "route", "add", "blackhole", f"{self.address(b)}/32")
        _ip("-n", self.names[b], "route", "add", "blackhole", f"{self.address(a)}/32")

    def heal(self, a: int, b: int) -> None:
        _ip("-n", self.names[a], "route", "del", "blackhole", f"{self.address(b)}/32")
        _ip("-n", self.names[b], "route", "del", "blackhole", f"{self.address(a)}/32")

    def _index(self, host: int) -> int:
        if not 0 <= host < len(self.names):
            raise IndexError(f"host {host}: there are {len(self.names)}")
        return host

    def close(self) -> None:
        """Kill what still runs in the namespaces, then remove them (their links go with them)."""
        for name in reversed(self._made):
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    def __enter__(self) -> "NetnsHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
