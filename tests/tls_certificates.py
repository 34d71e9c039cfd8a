"""Certificates for TLS tests, made with the openssl command: a job's authority and the one certificate every
process of the job presents (as the reference's TLS uses one per job), and a stranger's authority and
certificate (a peer that is not of the job)."""
import subprocess
from pathlib import Path
from typing import Dict

CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def authority(folder: Path, name: str) -> Dict[str, str]:
    """A certificate authority `name` and a certificate it signed, in `folder`: {"ca", "cert", "key"}."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / f"{name}-ca.pem", folder / f"{name}-ca.key"
    cert, key, request = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    _openssl("req", "-x509", *CURVE, "-keyout", str(ca_key), "-out", str(ca), "-days", "2", "-subj", f"/CN={name} ca")
    _openssl("req", *CURVE, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "2")
    key.chmod(0o600)
    return {"ca": str(ca), "cert": str(cert), "key": str(key)}


def tls_env(certificates: Dict[str, str]) -> Dict[str, str]:
    return {"MINDIO_TLS_CERT": certificates["cert"], "MINDIO_TLS_KEY": certificates["key"],
            "MINDIO_TLS_CA": certificates["ca"]}
