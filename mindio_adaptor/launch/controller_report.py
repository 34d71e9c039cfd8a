"""The launcher tells the recovery controller that a worker's process ended, or that nothing will replace the
ranks of a node whose launcher is gone.

The controller sees a death as the rank's closed connection. The launcher sees it from the OS (waitpid)
and knows how the process ended; its report reaches the controller even when the connection outlives the
process, which happens when a child holds an inherited copy of the descriptor (a helper forked by a
library, outside Python's at-fork hooks). The controller acts only for the process the report names
(the pid the rank registered with), so a late report never touches a replacement.

Where the controller is: MINDIO_CONTROLLER_ADDR (an external controller, the same variable the workers
read) or the facts the in-job controller's rank publishes in the workers' store (the port, sealed with the
job's token; the host is MASTER_ADDR, where rank 0 runs). The token is the launcher's MINDIO_TOKEN.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import List, Mapping

from mindio_adaptor import _native
from mindio_adaptor.core.job import job_store
from mindio_adaptor.core.job.controller_address import CONTROLLER_FACTS, ENV_TOKEN, controller_addresses
from mindio_adaptor.core.job.tls_config import TlsConfig, TlsConfigError

REPORT_TIMEOUT_S = 2.0  # the launcher's monitor loop waits this long at most for one report
STORE_TIMEOUT_S = 2.0
_HEADER = struct.Struct("<IHHQII")  # magic, version, type, seq, body length, crc (csrc/protocol/frame.h)


class ControllerReportError(RuntimeError):
    """The report could not be delivered or was refused; the message says which and why."""


@dataclass(frozen=True)
class ControllerContact:
    host: str
    port: int
    token: str


def find_controllers(master_addr: str, worker_store_port: int, environ: Mapping[str, str]) -> List[ControllerContact]:
    """Where the job's controllers listen (the active one, then its backups), or [] when the job has none
    (no high availability)."""
    try:
        external = controller_addresses(environ)
    except ValueError as err:
        raise ControllerReportError(str(err)) from None
    if external:
        return [ControllerContact(host, port, environ.get(ENV_TOKEN, "")) for host, port in external]
    try:
        port = job_store.read_at(master_addr, worker_store_port, CONTROLLER_FACTS, environ.get(ENV_TOKEN, ""),
                                 STORE_TIMEOUT_S)
    except (RuntimeError, ValueError) as err:
        raise ControllerReportError(f"the workers' store at {master_addr}:{worker_store_port} did not answer: "
                                    f"{err}") from None
    if port is None:
        return []
    return [ControllerContact(master_addr, int(port), environ[ENV_TOKEN])]


@dataclass(frozen=True)
class ControllerAnswer:
    message: str  # e.g. 'rank 2 declared dead'
    rank_had_left: bool = False  # it said goodbye (training over) before its process ended: do not restart it


def report_process_ended(contact: ControllerContact, rank: int, pid: int, how: str,
                         timeout_s: float = REPORT_TIMEOUT_S) -> ControllerAnswer:
    """Send one ProcessEnded report; returns the controller's answer."""
    answer = _exchange(contact, "PROCESS_ENDED", {"token": contact.token, "rank": rank, "pid": pid, "how": how},
                       timeout_s)
    if answer["result"] == _native.PROCESS_ENDED_AFTER_LEAVING:
        return ControllerAnswer(answer["message"], rank_had_left=True)
    if answer["result"] != 0:
        raise ControllerReportError(f"{_where(contact)} refused the report: {answer['message']}")
    return ControllerAnswer(answer["message"])


def report_no_replacement(contact: ControllerContact, ranks: List[int], why: str,
                          timeout_s: float = REPORT_TIMEOUT_S) -> str:
    """Tell the controller that nothing will replace `ranks` (their node's launcher is gone, no standby
    waits); returns its answer."""
    answer = _exchange(contact, "NO_REPLACEMENT", {"token": contact.token, "ranks": list(ranks), "why": why},
                       timeout_s)
    if answer["result"] != 0:
        raise ControllerReportError(f"{_where(contact)} refused the report: {answer['message']}")
    return answer["message"]


def _where(contact: ControllerContact) -> str:
    return f"the controller at {contact.host}:{contact.port}"


def _exchange(contact: ControllerContact, kind: str, message: dict, timeout_s: float) -> dict:
    """One report on a connection of its own, and the controller's ProcessEndedAck, decoded."""
    types = _native.MSG_TYPES
    body = _native.encode_message(types[kind], message)
    try:
        tls = TlsConfig.from_env()
        with socket.create_connection((contact.host, contact.port), timeout=timeout_s) as raw:
            # With the job's certificate configured the controller speaks TLS only (core/job/tls_config).
            conn = tls.client_context().wrap_socket(raw) if tls is not None else raw
            conn.sendall(_native.encode_frame(types[kind], 0, body))
            header = _receive(conn, _HEADER.size)
            reply = header + _receive(conn, _HEADER.unpack(header)[4])
    except (OSError, TlsConfigError) as err:  # ssl.SSLError is an OSError
        raise ControllerReportError(f"{_where(contact)} could not be told: {err}") from None
    reply_kind, _, reply_body = _native.decode_frame(reply)
    if reply_kind != types["PROCESS_ENDED_ACK"]:
        raise ControllerReportError(f"{_where(contact)} answered with message type {reply_kind}")
    return _native.decode_message(reply_kind, reply_body)


def _receive(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed before the answer was complete")
        data += chunk
    return data
