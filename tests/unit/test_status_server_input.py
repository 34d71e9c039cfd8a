"""status/server and its start from the environment: what is refused, and how it says so."""
import socket

import pytest

from mindio_adaptor.status.controller_source import status_port_from_env
from mindio_adaptor.status.job_status import job_status
from mindio_adaptor.status.server import StatusServer, StatusServerError


def empty_status():
    return job_status("INIT", [], [], {})


def test_no_token_no_server():
    with pytest.raises(ValueError, match="needs the job's token"):
        StatusServer(empty_status, "")


def test_a_port_in_use_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StatusServerError, match=f"cannot serve the status page on 127.0.0.1:{port} "
                                                    r"\(MINDIO_STATUS_PORT, MINDIO_STATUS_HOST\)"):
            StatusServer(empty_status, "t", "127.0.0.1", port)


@pytest.mark.parametrize("value, expected", [("", None), ("9400", 9400), (" 0 ", 0)])
def test_the_port_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("MINDIO_STATUS_PORT", value)
    assert status_port_from_env() == expected


@pytest.mark.parametrize("value", ["abc", "-1", "70000", "94.5"])
def test_a_bad_port_is_named(monkeypatch, value):
    monkeypatch.setenv("MINDIO_STATUS_PORT", value)
    with pytest.raises(ValueError, match=f"MINDIO_STATUS_PORT='{value}': expected a TCP port, 0..65535"):
        status_port_from_env()
