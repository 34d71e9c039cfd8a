"""Wake a thread stuck in a collective whose peer failed or hangs: the "stop device work" step of a
recovery, for backends that have no abort able to do it.

NCCL and HCCL: `ProcessGroup.abort()` (ncclCommAbort / HcclCommDestroy) makes a pending collective
fail; torch exposes it as `_abort_process_group`. Gloo (torch 2.13): abort and destroy return, but a
collective already waiting on a silent peer keeps waiting until the group's timeout (observed, see
core/communication/comm.py). What does wake it is the one event gloo's transport reacts to at once: its TCP
connection closing. So for gloo we shut down this process's TCP connections, except the ones that
must survive the fault (the rendezvous store, the recovery controller); every gloo pair then sees
"Connection closed by peer" in the waiting thread, which raises into Python. The process groups are
unusable afterwards, as after an abort: the caller rebuilds them (core/communication/comm.CommEpochs).
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Collection, List

import psutil
import torch.distributed as dist

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Connection:
    fd: int
    family: int
    local_port: int
    remote_port: int  # 0 for a listening socket


def tcp_connections() -> List[Connection]:
    """This process's TCP sockets (IPv4 and IPv6), listening ones included."""
    out = []
    for c in psutil.Process().net_connections(kind="tcp"):
        if c.fd < 0:
            continue
        out.append(Connection(c.fd, int(c.family), c.laddr.port if c.laddr else 0,
                              c.raddr.port if c.raddr else 0))
    return out


def connections_to_break(connections: Collection[Connection], keep_ports: Collection[int]) -> List[Connection]:
    """The established connections that touch none of `keep_ports` (local or remote side): a server
    socket accepted on a kept port has it as local port, a client connected to one as remote port.
    Listening sockets stay: a listener carries no collective."""
    keep = set(keep_ports)
    return [c for c in connections
            if c.remote_port and c.local_port not in keep and c.remote_port not in keep]


def shutdown_connections(connections: Collection[Connection]) -> int:
    """shutdown(2) each socket (not close: the fd stays owned by its transport, which then sees the
    end of the stream and fails its pending operations). Returns how many were shut down.

    An fd listed a moment ago may have been closed since (gloo closes a pair's socket when its peer
    goes) and its number reused by another thread's new socket: a DataLoader's fd-passing connection
    was shut down that way once, and its step failed with EOFError. So the socket is shut down only
    if it is still the listed connection (same ports)."""
    done = 0
    for c in connections:
        try:
            sock = socket.socket(fileno=os.dup(c.fd))  # a dup, its family and type read from the fd
        except OSError:
            continue  # closed meanwhile
        try:
            if _is_connection(sock, c):
                sock.shutdown(socket.SHUT_RDWR)
                done += 1
        except OSError:
            pass  # already shut down or not connected any more
        finally:
            sock.close()
    return done


def _is_connection(sock: socket.socket, c: Connection) -> bool:
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return False
    return sock.getsockname()[1] == c.local_port and sock.getpeername()[1] == c.remote_port


def break_collectives(backend: str, keep_ports: Collection[int]) -> str:
    """Make every collective this process is waiting in fail now. Returns what was done, for the log."""
    if backend == "gloo":
        victims = connections_to_break(tcp_connections(), keep_ports)
        count = shutdown_connections(victims)
        return f"shut down {count} gloo connection(s), kept ports {sorted(set(keep_ports))}"
    if dist.is_initialized():
        dist.distributed_c10d._abort_process_group()
        return f"aborted the {backend} process groups"
    return "no process group to abort"
