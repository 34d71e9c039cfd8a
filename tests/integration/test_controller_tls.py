"""The controller's link over mutual TLS 1.3 (csrc/net/tls, core/job/tls_config), with certificates made by openssl:
real processor processes register, heartbeat and have a fault repaired through it; a peer speaking plain TCP,
or TLS with a stranger's certificate, is closed without an answer and costs the job nothing; a peer with the
job's certificate but not its token is refused as on plain TCP."""
import socket
import ssl
import sys
from pathlib import Path

import pytest

from controller_harness import Job, read_until_closed, register_frame, wait_until
from mindio_adaptor import _native as nat
from mindio_adaptor.core.job.tls_config import TlsConfig
from mindio_adaptor.ttp import controller as ctl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tls_certificates import authority, tls_env  # noqa: E402

pytestmark = pytest.mark.integration
TOKEN = "controller-tls-token"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("certificates")
    return authority(folder, "job"), authority(folder, "stranger")


def tls_client(certificates, ca):
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    context.load_cert_chain(certificates["cert"], certificates["key"])
    return context


def test_a_job_over_tls_is_repaired_and_strangers_are_refused(tmp_path, job_env, monkeypatch, certificates):
    job_certificate, stranger = certificates
    for name, value in {**tls_env(job_certificate), "MINDIO_TOKEN": TOKEN}.items():
        monkeypatch.setenv(name, value)  # the controller here, and the workers, which inherit it
    job = Job(tmp_path, 4, fail_rank=1)
    try:
        job.wait_ready()
        address = ("127.0.0.1", job.port)
        with socket.create_connection(address, timeout=10) as plain:  # plain TCP to the TLS port
            plain.sendall(register_frame(TOKEN))
            answer = read_until_closed(plain, 10, "a plain TCP peer")
            assert nat.MSG_TYPES["REGISTER_ACK"].to_bytes(2, "little") not in answer[:16] or len(answer) < 16
        with socket.create_connection(address, timeout=10) as raw:  # a stranger's certificate
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with tls_client(stranger, job_certificate["ca"]).wrap_socket(raw) as conn:
                    conn.sendall(register_frame(TOKEN))
                    if not conn.recv(16):
                        raise ConnectionError("closed without an answer")
        with socket.create_connection(address, timeout=10) as raw:  # the job's certificate, a wrong token
            with TlsConfig.from_env().client_context().wrap_socket(raw) as conn:
                conn.sendall(register_frame("not the token"))
                answer = read_until_closed(conn, 10, "a peer with a wrong token")
        kind, _, body = nat.decode_frame(answer)
        assert nat.decode_message(kind, body)["message"].startswith("wrong token")
        assert ctl.controller_state() == "NORMAL" and not job.controller_events("fault")
        job.fire()  # rank 1's fault, repaired over the TLS link
        results = job.wait_results(range(4), timeout=30)
        assert all(r["result"] == "done" for r in results.values()), results
        wait_until(lambda: all(p.poll() == 0 for p in job.procs.values()), 30, "every worker to finish")
    except AssertionError:
        print(job.worker_logs())
        raise
    finally:
        job.close()
