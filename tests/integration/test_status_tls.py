"""The status server over mutual TLS 1.3 (core/job/tls_config), with certificates made by openssl: a client with
the job's certificate gets the status (`mindio-adaptor status`'s own fetch too), one with a stranger's
certificate, without one, or speaking plain HTTP is refused at the handshake and holds nothing; a partial or
wrong configuration is one line naming the variable, also from `mindio-adaptor controller` before it
listens."""
import json
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from mindio_adaptor.cli.status import fetch_status
from mindio_adaptor.core.job.tls_config import TlsConfig, TlsConfigError
from mindio_adaptor.status.job_status import job_status
from mindio_adaptor.status.server import StatusServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tls_certificates import authority, tls_env  # noqa: E402

pytestmark = pytest.mark.integration
TOKEN = "status-tls-token"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("certificates")
    return authority(folder, "job"), authority(folder, "stranger")


@pytest.fixture
def server(certificates):
    job, _ = certificates
    server = StatusServer(lambda: job_status("NORMAL", [], [], {}), TOKEN,
                          tls=TlsConfig.from_env(tls_env(job)), deadline_s=3).start()
    yield server
    server.stop()


def client_context(certificates=None, ca=None):
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    if certificates:
        context.load_cert_chain(certificates["cert"], certificates["key"])
    return context


def get(server, context):
    request = urllib.request.Request("https://%s:%d/status.json" % server.address,
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        return json.loads(answer.read())


def test_the_jobs_certificate_gets_the_status(server, certificates, monkeypatch):
    job, _ = certificates
    assert server.scheme == "https"
    assert get(server, TlsConfig.from_env(tls_env(job)).client_context())["state"] == "NORMAL"
    for name, value in tls_env(job).items():
        monkeypatch.setenv(name, value)
    assert fetch_status("%s:%d" % server.address, TOKEN)["state"] == "NORMAL"  # mindio-adaptor status


def test_a_peer_without_the_jobs_certificate_is_refused_and_holds_nothing(server, certificates):
    job, stranger = certificates
    for context in (client_context(stranger, ca=job["ca"]), client_context(None, ca=job["ca"])):
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(server, context)
    with socket.create_connection(server.address, timeout=10) as plain:  # HTTP on the TLS port
        plain.sendall(b"GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"HTTP/1." not in plain.recv(4096)
    # The server trusts only the job's authority: a client checking it against another fails as well.
    with pytest.raises((ssl.SSLError, urllib.error.URLError)):
        get(server, client_context(job, ca=stranger["ca"]))
    assert get(server, TlsConfig.from_env(tls_env(job)).client_context())["state"] == "NORMAL"


def test_a_partial_or_wrong_configuration_is_one_line(certificates, tmp_path):
    job, stranger = certificates
    assert TlsConfig.from_env({}) is None
    with pytest.raises(TlsConfigError, match="MINDIO_TLS_KEY, MINDIO_TLS_CA are not set"):
        TlsConfig.from_env({"MINDIO_TLS_CERT": job["cert"]})
    with pytest.raises(TlsConfigError, match="MINDIO_TLS_CA=/no/such: the file cannot be read"):
        TlsConfig.from_env({**tls_env(job), "MINDIO_TLS_CA": "/no/such"})
    with pytest.raises(TlsConfigError, match="cannot be used together"):
        TlsConfig.from_env({**tls_env(job), "MINDIO_TLS_KEY": stranger["key"]})
    env = {**tls_env(job), "MINDIO_TLS_CA": "", "MINDIO_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "mindio_adaptor.cli", "controller", "--world-size", "2",
                           "--port", "0", "--status-port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "listening" not in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        "mindio-adaptor controller: TLS needs MINDIO_TLS_CERT, MINDIO_TLS_KEY, MINDIO_TLS_CA together; "
        "MINDIO_TLS_CA is not set (unset all three for plain TCP)"]
