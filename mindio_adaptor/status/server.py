"""The controller's status over HTTP, opt-in: a page for a person (/), the Prometheus text format for a
scraper (/metrics) and JSON for `mindio-adaptor status` (/status.json).

Every request must carry the job's token (the one the processors present): an `Authorization: Bearer
<token>` header, or `?token=<token>` in the URL for a browser. Without it the answer is 401 and says
why. The server binds only to the interface the operator names (default 127.0.0.1). Plain HTTP, as
the controller's link is plaintext: run it on a trusted network."""
import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

from mindio_adaptor.status.job_status import JobStatus
from mindio_adaptor.status.metrics import metrics_text
from mindio_adaptor.status.page import status_page

logger = logging.getLogger(__name__)

STATUS_PORT_ENV = "MINDIO_STATUS_PORT"
STATUS_HOST_ENV = "MINDIO_STATUS_HOST"
REQUEST_TIMEOUT_S = 10.0  # a client that stops sending mid-request is dropped


class StatusServerError(RuntimeError):
    pass


class StatusServer:
    def __init__(self, source: Callable[[], JobStatus], token: str, host: str = "127.0.0.1", port: int = 0):
        if not token:
            raise ValueError("the status server needs the job's token (MINDIO_TOKEN): it serves nothing without one")
        self.source, self.token = source, token
        try:
            self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        except OSError as err:
            raise StatusServerError(f"cannot serve the status page on {host}:{port} ({STATUS_PORT_ENV}, "
                                    f"{STATUS_HOST_ENV}): {err.strerror or err}") from err
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def address(self):
        return self._httpd.server_address[:2]

    def start(self) -> "StatusServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="mindio-status", daemon=True)
        self._thread.start()
        logger.info("status page at http://%s:%d/ (metrics at /metrics; the job's token is required)", *self.address)
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def authorized(self, header: Optional[str], query_token: Optional[str]) -> bool:
        given = query_token or (header[len("Bearer "):] if header and header.startswith("Bearer ") else "")
        return hmac.compare_digest(given.encode(), self.token.encode())


def _handler_for(server: StatusServer):
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S

        def do_GET(self):  # noqa: N802 (the name http.server calls)
            url = urlsplit(self.path)
            token = parse_qs(url.query).get("token", [None])[0]
            if not server.authorized(self.headers.get("Authorization"), token):
                return self._send(401, "text/plain; charset=utf-8",
                                  b"401: this status page needs the job's token (Authorization: Bearer <token>, "
                                  b"or ?token=<token>)\n")
            routes = {"/": self._page, "/metrics": self._metrics, "/status.json": self._json}
            if url.path not in routes:
                return self._send(404, "text/plain; charset=utf-8",
                                  f"404: no {url.path} here; try /, /metrics or /status.json\n".encode())
            return routes[url.path](token)

        def _page(self, token):
            self._send(200, "text/html; charset=utf-8", status_page(server.source(), token).encode())

        def _metrics(self, token):
            self._send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text(server.source))

        def _json(self, token):
            self._send(200, "application/json", json.dumps(server.source().to_json()).encode())

        def _send(self, code: int, content_type: str, body: bytes):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):  # requests are not news; errors still reach log_error
            pass

    return Handler
