"""The client side of a controller's status server, for the subcommands that talk to a running job: its
address and token from the command line, HTTPS with the job's certificate when MINDIO_TLS_CERT, MINDIO_TLS_KEY
and MINDIO_TLS_CA are set (core/job/tls_config), and every failure as one line naming the server."""
import json
import os
import urllib.error
import urllib.request
from typing import Any, Dict, Optional

from mindio_adaptor.core.job.controller_address import ENV_TOKEN
from mindio_adaptor.core.job.tls_config import TlsConfig, TlsConfigError

TIMEOUT_S = 10.0


def add_server_arguments(parser) -> None:
    parser.add_argument("--controller", required=True, metavar="HOST:PORT",
                        help="the status server (MINDIO_STATUS_PORT / --status-port of the controller)")
    parser.add_argument("--token", default=None, help=f"the job's token (default: {ENV_TOKEN})")


def token_of(args) -> str:
    token = args.token or os.environ.get(ENV_TOKEN, "")
    if not token:
        raise SystemExit(f"the status server needs the job's token: pass --token or set {ENV_TOKEN}")
    return token


def request_json(address: str, token: str, path: str, body: Optional[Dict[str, Any]] = None) -> dict:
    """GET `path` (POST `body` as JSON when given) from the status server at `address`; its JSON answer."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SystemExit(f"--controller {address!r}: expected HOST:PORT")
    try:
        tls = TlsConfig.from_env()
    except TlsConfigError as err:
        raise SystemExit(str(err)) from None
    scheme = "https" if tls is not None else "http"
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(f"{scheme}://{host}:{port}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S,
                                    context=tls.client_context() if tls is not None else None) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as err:
        raise SystemExit(f"{address}: {err.code} {_error_text(err.read())}") from None
    except (urllib.error.URLError, OSError) as err:
        raise SystemExit(f"{address}: no status server reachable ({getattr(err, 'reason', err)})") from None


def _error_text(raw: bytes) -> str:
    text = raw.decode(errors="replace").strip()
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return text
