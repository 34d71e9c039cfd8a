"""Where a job's recovery controller listens, as the workers and their launchers find it.

An external controller is named by MINDIO_CONTROLLER_ADDR=host:port (or host:port,host:port,...: the
active controller, then its backups in the order they take over); the in-job one (in rank 0's
process) publishes its port in the workers' store under CONTROLLER_FACTS (sealed: core/job/job_store), for the
processes that cannot ask their peers (a replacement, the launchers). MINDIO_TOKEN is the shared secret; it
reaches the processes by their environment (or rank 0's broadcast), never through a store.
"""
from __future__ import annotations

import os
from typing import List, Mapping, Optional, Tuple

ENV_CONTROLLER = "MINDIO_CONTROLLER_ADDR"
ENV_TOKEN = "MINDIO_TOKEN"
CONTROLLER_FACTS = "controller"  # the in-job controller's port, in the job's store


def controller_addresses(environ: Mapping[str, str] = os.environ) -> Optional[List[Tuple[str, int]]]:
    """[(host, port), ...] of the external controller and its backups, or None for the in-job one."""
    value = environ.get(ENV_CONTROLLER)
    if not value:
        return None
    return [_endpoint(part.strip(), value) for part in value.split(",")]


def controller_address(environ: Mapping[str, str] = os.environ) -> Optional[Tuple[str, int]]:
    """(host, port) of the external controller (the first of the list), or None for the in-job one."""
    addresses = controller_addresses(environ)
    return None if addresses is None else addresses[0]


def _endpoint(part: str, value: str) -> Tuple[str, int]:
    host, sep, port = part.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{ENV_CONTROLLER}={value!r}: expected host:port with a port in 1..65535 (or a comma list "
                         f"of them: the controller, then its backups), got {part!r}")
    return host, int(port)

