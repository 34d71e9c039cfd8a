"""The controller's status over HTTP, opt-in: a page for a person (/), the Prometheus text format for a
scraper (/metrics) and JSON for `mindio-adaptor status` (/status.json).

Every request must carry the job's token (the one the processors present): an `Authorization: Bearer
<token>` header (the scheme in any case), or, for a browser's first visit, `?token=<token>` in the URL,
answered with a cookie that the page's refreshes carry instead (the page never puts the token in an
address). Without it the answer is 401 and says why. The server binds only to the interface the
operator names (default 127.0.0.1). What a peer can hold is bounded: each connection gets one request
and REQUEST_DEADLINE_S to send it and be answered, and at most MAX_CONNECTIONS are open at once. Plain
HTTP by default, for a trusted network; HTTPS with mutual TLS 1.3 when the job's certificate is configured
(core/job/tls_config: MINDIO_TLS_CERT, MINDIO_TLS_KEY, MINDIO_TLS_CA): a client must then present a certificate
the job's authority signed, and the token is still required (docs/security.md).

Commands that change the job (POST, e.g. /pause and /continue: status/commands) take the token from the
Authorization header only: a browser's cookie would let any page it visits send them."""
import errno
import hmac
import json
import logging
import socket
import ssl
import threading
import time
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional
from urllib.parse import parse_qs, quote, unquote, urlsplit

from mindio_adaptor.core.job.tls_config import TlsConfig
from mindio_adaptor.status.job_status import JobStatus
from mindio_adaptor.status.metrics import metrics_text
from mindio_adaptor.status.page import status_page

logger = logging.getLogger(__name__)

STATUS_PORT_ENV = "MINDIO_STATUS_PORT"
STATUS_HOST_ENV = "MINDIO_STATUS_HOST"
REQUEST_TIMEOUT_S = 10.0  # the longest wait for one read of a request
REQUEST_DEADLINE_S = 15.0  # the longest a connection may take, whatever it sends (a byte every few seconds too)
MAX_CONNECTIONS = 32  # open at once; more are closed at accept
ACCEPT_BACKOFF_S = 0.1  # between accept attempts at the fd limit
COOKIE = "mindio_token"
MAX_COMMAND_BYTES = 4096  # a command's JSON body
SERVER_NAME = "mindio-status"  # the Server header: no Python or library version


class StatusServerError(RuntimeError):
    pass


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds at most max_connections and closes each after deadline_s."""

    daemon_threads = True

    def __init__(self, address, handler, max_connections: int, deadline_s: float,
                 tls: Optional[ssl.SSLContext] = None):
        self.max_connections, self.deadline_s, self.tls = max_connections, deadline_s, tls
        self._open: Dict[socket.socket, float] = {}
        self._open_lock = threading.Lock()
        self.refused = self.expired = 0
        self._refusing = self._at_fd_limit = False
        super().__init__(address, handler)

    def get_request(self):
        try:
            sock, address = super().get_request()
        except OSError as err:
            # At the fd limit the listening socket stays readable and accept fails at once: without a
            # pause serve_forever would spin on it.
            if err.errno in (errno.EMFILE, errno.ENFILE):
                if not self._at_fd_limit:
                    logger.warning("status server: cannot accept connections (%s): trying again every %.1f s",
                                   err.strerror, ACCEPT_BACKOFF_S)
                self._at_fd_limit = True
                time.sleep(ACCEPT_BACKOFF_S)
            raise
        if self.tls is None:
            return sock, address
        # The handshake runs in the connection's own thread (its first read), under the deadline: a peer that
        # never completes it holds no more than a slowloris does.
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def verify_request(self, request, client_address):
        with self._open_lock:
            if len(self._open) >= self.max_connections:
                self.refused += 1
                if not self._refusing:
                    logger.warning("status server: %d connections open (the cap): closing new ones at accept",
                                   self.max_connections)
                self._refusing = True
                return False
            self._at_fd_limit = False
            if self._refusing:
                logger.warning("status server: accepting again (%d connections closed at accept so far)", self.refused)
            self._refusing = False
            self._open[request] = time.monotonic() + self.deadline_s
        return True

    def shutdown_request(self, request):
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def open_connections(self) -> int:
        with self._open_lock:
            return len(self._open)

    def close_overdue(self) -> None:
        """Shut the connections past their deadline: their handler's read or write fails and it ends."""
        now = time.monotonic()
        with self._open_lock:
            overdue = [sock for sock, deadline in self._open.items() if deadline < now]
            for sock in overdue:
                self._open[sock] = float("inf")  # shut once; the handler's exit removes it
        for sock in overdue:
            self.expired += 1
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# A command gets the request's JSON object and returns what to answer; ValueError: the job refused it (409),
# CommandError: the request itself is wrong (400).
Command = Callable[[Dict[str, Any]], str]


class CommandError(ValueError):
    """A command's request is malformed (a missing or mistyped field): answered 400, naming it."""


class StatusServer:
    def __init__(self, source: Callable[[], JobStatus], token: str, host: str = "127.0.0.1", port: int = 0,
                 max_connections: int = MAX_CONNECTIONS, deadline_s: float = REQUEST_DEADLINE_S,
                 tls: Optional[TlsConfig] = None, commands: Optional[Dict[str, "Command"]] = None):
        if not token:
            raise ValueError("the status server needs the job's token (MINDIO_TOKEN): it serves nothing without one")
        self.source, self.token = source, token
        self.commands = dict(commands or {})
        self.scheme = "https" if tls is not None else "http"
        try:
            self._httpd = _BoundedHTTPServer((host, port), _handler_for(self), max_connections, deadline_s,
                                             tls.server_context() if tls is not None else None)
        except OSError as err:
            raise StatusServerError(f"cannot serve the status page on {host}:{port} ({STATUS_PORT_ENV}, "
                                    f"{STATUS_HOST_ENV}): {err.strerror or err}") from err
        self._threads = []
        self._stopped = threading.Event()

    @property
    def address(self):
        return self._httpd.server_address[:2]

    def start(self) -> "StatusServer":
        self._threads = [threading.Thread(target=self._httpd.serve_forever, name="mindio-status", daemon=True),
                         threading.Thread(target=self._reap, name="mindio-status-deadline", daemon=True)]
        for thread in self._threads:
            thread.start()
        logger.info("status page at %s://%s:%d/ (metrics at /metrics; the job's token is required%s)", self.scheme,
                    *self.address, ", and a certificate of the job's authority" if self.scheme == "https" else "")
        return self

    def _reap(self) -> None:
        while not self._stopped.wait(0.25):
            self._httpd.close_overdue()

    def stats(self) -> Dict[str, int]:
        return {"open": self._httpd.open_connections(), "refused_at_accept": self._httpd.refused,
                "closed_at_deadline": self._httpd.expired}

    def stop(self) -> None:
        self._stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(5)

    def authorized(self, header: Optional[str], query_token: Optional[str], cookie_token: Optional[str]) -> bool:
        scheme, _, credentials = (header or "").strip().partition(" ")
        given = query_token or (credentials.strip() if scheme.lower() == "bearer" else "") or cookie_token or ""
        return hmac.compare_digest(given.encode(), self.token.encode())


def _handler_for(server: StatusServer):
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S
        server_version = SERVER_NAME

        def version_string(self):
            return SERVER_NAME

        def setup(self):
            super().setup()
            if isinstance(self.request, ssl.SSLSocket):
                self.request.do_handshake()  # bounded by the read timeout and the deadline

        def handle(self):
            try:
                super().handle()
            except (ssl.SSLError, OSError) as err:  # a peer without the job's certificate, or one that left
                logger.debug("status server: connection ended: %s", err)

        def do_GET(self):  # noqa: N802 (the name http.server calls)
            url = urlsplit(self.path)
            token = parse_qs(url.query).get("token", [None])[0]
            if not server.authorized(self.headers.get("Authorization"), token, self._cookie_token()):
                return self._send(401, "text/plain; charset=utf-8",
                                  b"401: this status page needs the job's token (Authorization: Bearer <token>, "
                                  b"or ?token=<token>)\n")
            routes = {"/": self._page, "/metrics": self._metrics, "/status.json": self._json}
            if url.path not in routes:
                return self._send(404, "text/plain; charset=utf-8",
                                  f"404: no {url.path} here; try /, /metrics or /status.json\n".encode())
            # A browser that came with ?token= keeps it in a cookie, so the page's refreshes need no token
            # in their address.
            cookie = f"{COOKIE}={quote(token, safe='')}; HttpOnly; SameSite=Strict; Path=/" if token else None
            return routes[url.path](cookie)

        def do_POST(self):  # noqa: N802
            url = urlsplit(self.path)
            if not server.authorized(self.headers.get("Authorization"), None, None):
                return self._answer(401, {"error": "a command needs the job's token in Authorization: Bearer <token>"})
            if url.path not in server.commands:
                return self._answer(404, {"error": f"no command {url.path}; commands: {sorted(server.commands)}"})
            logger.info("status server: command %s from %s", url.path, self.client_address[0])
            try:
                request = self._command_body()
                message = server.commands[url.path](request)
            except CommandError as err:
                return self._answer(400, {"error": str(err)})
            except ValueError as err:
                return self._answer(409, {"error": str(err)})
            return self._answer(200, {"ok": True, "message": message})

        def _command_body(self) -> Dict[str, Any]:
            length = self.headers.get("Content-Length", "0")
            if not length.isdigit() or int(length) > MAX_COMMAND_BYTES:
                raise CommandError(f"Content-Length {length!r}: expected at most {MAX_COMMAND_BYTES} bytes")
            raw = self.rfile.read(int(length)) if int(length) else b"{}"
            try:
                body = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise CommandError(f"the body is not JSON: {err}") from None
            if not isinstance(body, dict):
                raise CommandError("the body must be a JSON object")
            return body

        def _answer(self, code: int, body: Dict[str, Any]):
            self._send(code, "application/json", json.dumps(body).encode() + b"\n")

        def _cookie_token(self) -> Optional[str]:
            try:
                morsel = SimpleCookie(self.headers.get("Cookie", "")).get(COOKIE)
            except Exception:  # noqa: BLE001 (a malformed cookie header is no token)
                return None
            return unquote(morsel.value) if morsel is not None else None

        def _page(self, cookie):
            self._send(200, "text/html; charset=utf-8", status_page(server.source()).encode(), cookie)

        def _metrics(self, cookie):
            self._send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text(server.source), cookie)

        def _json(self, cookie):
            self._send(200, "application/json", json.dumps(server.source().to_json()).encode(), cookie)

        def _send(self, code: int, content_type: str, body: bytes, cookie: Optional[str] = None):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if cookie:
                self.send_header("Set-Cookie", cookie)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):  # requests are not news; errors still reach log_error
            pass

    return Handler
