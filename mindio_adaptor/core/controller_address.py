"""Where a job's recovery controller listens, as the workers and their launchers find it.

An external controller is named by MINDIO_CONTROLLER_ADDR=host:port; the in-job one (in rank 0's
process) publishes its port and the job's token in the workers' store under CONTROLLER_FACTS, for the
processes that cannot ask their peers (a replacement, the launchers). MINDIO_TOKEN is the shared secret.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional, Tuple

ENV_CONTROLLER = "MINDIO_CONTROLLER_ADDR"
ENV_TOKEN = "MINDIO_TOKEN"
CONTROLLER_FACTS = "controller"  # (port, token) in the job's store


def controller_address(environ: Mapping[str, str] = os.environ) -> Optional[Tuple[str, int]]:
    """(host, port) of an external controller, or None for the in-job one."""
    value = environ.get(ENV_CONTROLLER)
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{ENV_CONTROLLER}={value!r}: expected host:port with a port in 1..65535")
    return host, int(port)
