"""The running controller of this process (ttp/controller) as a JobStatus source, and the opt-in start of
its status server (MINDIO_STATUS_PORT) for the in-job and the standalone controller."""
import os
import tempfile
from typing import Optional

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.job.tls_config import TlsConfig
from mindio_adaptor.status.commands import controller_commands
from mindio_adaptor.status.job_status import JobStatus, job_status
from mindio_adaptor.status.server import STATUS_HOST_ENV, STATUS_PORT_ENV, StatusServer


def controller_status() -> JobStatus:
    from mindio_adaptor.ttp import controller

    return job_status(controller.controller_state(), controller.controller_ranks(), controller.controller_events(),
                      controller.controller_stats(), controller.controller_layout(), controller.controller_term(),
                      controller.controller_goodput())


def status_port_from_env() -> Optional[int]:
    value = os.environ.get(STATUS_PORT_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise ValueError(f"{STATUS_PORT_ENV}={value!r}: expected a TCP port, 0..65535 (0: any free port)")
    return int(value)


def start_if_asked(port: Optional[int] = None, host: Optional[str] = None) -> Optional[StatusServer]:
    """The status server of this process's controller when a port is given (or MINDIO_STATUS_PORT is set)."""
    port = status_port_from_env() if port is None else port
    if port is None:
        return None
    host = host or os.environ.get(STATUS_HOST_ENV, "127.0.0.1")
    return StatusServer(controller_status, os.environ.get(ENV_TOKEN, ""), host, port, tls=TlsConfig.from_env(),
                        commands=controller_commands()).start()


def write_token_file(token: str) -> str:
    """A file holding `token`, in a fresh directory of mode 700, the file of mode 600; returns its path."""
    directory = tempfile.mkdtemp(prefix="mindio-status-")
    path = os.path.join(directory, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return path
