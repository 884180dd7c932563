"""The HTTP endpoint: a WSGI dispatcher, a threaded server, optional TLS and basic auth (edge).

Paths: ``/metrics`` (prometheus_client's WSGI app over our registry: text 0.0.4, or OpenMetrics
when the ``Accept`` header asks, gzip when accepted), ``/status`` (JSON from a callable),
``/units`` and ``/units/{host}/{unit}`` (the startup endpoint, ``readiness.py``: 200 ready, 503
starting/unhealthy/stopped, 500 crashed, 404 unknown unit), ``/healthz`` (``ok``), ``/runbook``
(docs/runbook.md as HTML, ``serve.runbook``: the alerts' and the page's links), ``/`` (the
status page, ``page.render_page`` over the ``/status`` document; ``/?part=main`` is the part its
script refreshes) and ``/static/…`` (the page's CSS and script, package data: no CDN).
Everything but ``/healthz`` sits behind basic auth when users are configured. HTML answers carry
a Content-Security-Policy that allows only the daemon's own script and style: log text on the
page is escaped, and could not run anyway.

TLS and basic auth come from a Prometheus exporter-toolkit *web config* file, read by
``web_config.load_exporter_security`` (its format and what is refused are described there; the
daemon runs it before it serves, ``check-config`` runs the same function; re-exported here).

The server runs ``serve_forever`` in a daemon thread and one daemon thread per connection; the
TLS handshake happens on the connection's thread, so a slow client cannot block ``accept``.
What an unauthenticated client can hold is bounded (``ConnectionLimits``): at most
``max_connections`` connections (a quarter of the fd limit at most), each closed unless its
handshake and request headers are read within ``request_read_seconds`` of ``accept``; when the
cap is reached, the connection that has waited longest for its request makes room. A client
that goes away mid-answer is one rate-limited ``http_connection_aborted`` line, not wsgiref's
traceback on stderr.
Passwords are never logged and never kept: successful checks are cached as a keyed hash, per
user, for ``cache_seconds``, so bcrypt stays off the hot path of a 15 s scrape. Failed logins
are logged (``http_auth_failed``: client address, user name, path; never the password), at
most once a minute with how many there were. Responses name the server
``vllm-sentinel/<version>`` (``Server:``), never the Python version.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import hmac
import io
import json
import resource
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from socketserver import TCPServer, ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import bcrypt
import structlog
from prometheus_client.registry import CollectorRegistry

from vllm_sentinel import __version__
from vllm_sentinel.engine.hints import RUNBOOK_URL
from vllm_sentinel.engine.snapshot import Snapshot
from vllm_sentinel.log import Throttle
from vllm_sentinel.serve.exporter import make_metrics_app
from vllm_sentinel.serve.page import REFRESH_SECONDS, render_main, render_page
from vllm_sentinel.serve.readiness import HTTP_STATUS, UnitState, find_unit, units_document
from vllm_sentinel.serve.web_config import (
    ExporterSecurity,
    TlsServerConfig,
    WebConfig,
    build_ssl_context,
    load_exporter_security,
    load_web_config,
)

__all__ = [
    "AUTH_FAILURE_LOG_INTERVAL_SECONDS",
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_REQUEST_READ_SECONDS",
    "REALM",
    "RUNBOOK_PATH",
    "SERVER_NAME",
    "BasicAuthenticator",
    "ConnectionLimits",
    "ExporterSecurity",
    "ServerHandle",
    "TlsServerConfig",
    "WebConfig",
    "build_ssl_context",
    "load_exporter_security",
    "load_web_config",
    "make_app",
    "start_http_server",
]

DEFAULT_LISTEN_HOST = "127.0.0.1"
"""Bind to loopback unless told otherwise."""

DEFAULT_MAX_CONNECTIONS = 64
"""Connections served at once by default (``ConnectionLimits``)."""

DEFAULT_REQUEST_READ_SECONDS = 10.0
"""Seconds from ``accept`` to read a request's headers, TLS handshake included, by default."""

REALM = "vllm-sentinel"
"""The basic-auth realm sent with 401 answers."""

SERVER_NAME = f"vllm-sentinel/{__version__}"
"""The ``Server:`` header of every response."""

AUTH_FAILURE_LOG_INTERVAL_SECONDS = 60.0
"""``http_auth_failed`` is logged at most this often (with the count of failures since)."""

_log = structlog.get_logger("vllm_sentinel.serve.http")

RUNBOOK_PATH = "/runbook"
"""Where the daemon serves docs/runbook.md (the alerts' and the dashboard's default link)."""

# A valid cost-10 hash of a throwaway password: checked against for unknown users so that an
# unknown name costs as much time as a wrong password.
_DUMMY_HASH = b"$2b$10$k2YyE7TDTtcBvqmbwRyt3eTFkQxlkrV1QpnXzrVISkIxqovO1t892"


# --------------------------------------------------------------------------- web config


# --------------------------------------------------------------------------- basic auth


class BasicAuthenticator:
    """Check ``Authorization: Basic`` headers against bcrypt hashes, caching successes.

    Args:
        users: user name → bcrypt hash.
        cache_seconds: how long a successful check is remembered (0 disables the cache).
        clock: monotonic seconds; injected by tests.

    Thread-safe: the server checks from one thread per connection.
    """

    def __init__(
        self,
        users: Mapping[str, str],
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = {user: hashed.encode("ascii") for user, hashed in users.items()}
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[bytes, float]] = {}
        self._failures = Throttle(AUTH_FAILURE_LOG_INTERVAL_SECONDS, clock)

    def log_failure(self, header: str | None, client: str | None, path: str) -> None:
        """Log a refused request (rate-limited): who asked, as which user; never a password."""
        count = self._failures.admit()
        if count is None:
            return
        credentials = _parse_basic(header)
        _log.warning(
            "http_auth_failed",
            client=client,
            user=credentials[0][:64] if credentials is not None else None,
            path=path[:200],
            failures=count,
            detail=f"logged at most every {AUTH_FAILURE_LOG_INTERVAL_SECONDS:g} s; failures "
            "counts those since the last line",
        )

    def _digest(self, user: str, password: bytes) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + password, hashlib.sha256).digest()

    def is_authorized(self, header: str | None) -> bool:
        """Say whether an ``Authorization`` header value names a user with the right password."""
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user, password = credentials
        digest = self._digest(user, password)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(user)
        if cached is not None and cached[1] > now and hmac.compare_digest(cached[0], digest):
            return True
        hashed = self._users.get(user)
        try:
            matched = bcrypt.checkpw(password, hashed or _DUMMY_HASH) and hashed is not None
        except ValueError:  # a password over bcrypt's 72 bytes
            matched = False
        if matched and self._cache_seconds > 0:
            with self._lock:
                self._cache[user] = (digest, now + self._cache_seconds)
        return matched


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    raw_user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return raw_user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------- WSGI app

_STATIC_TYPES = {
    "status.css": "text/css; charset=utf-8",
    "status.js": "text/javascript; charset=utf-8",
}
_HTML = "text/html; charset=utf-8"
_PAGE_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
)
_MIN_REFRESH, _MAX_REFRESH = 1.0, 300.0
# the runbook page: our own Markdown, no script at all, its one inline style block
_RUNBOOK_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
)


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The page's assets from package data: name → (bytes, content type)."""
    folder = resources.files("vllm_sentinel.serve").joinpath("static")
    return {
        name: (folder.joinpath(name).read_bytes(), kind) for name, kind in _STATIC_TYPES.items()
    }


def _refresh_seconds(query: Mapping[str, list[str]]) -> float:
    """``?refresh=SECONDS`` within 1–300, else the default."""
    try:
        seconds = float(query.get("refresh", [""])[0])
    except ValueError:
        return REFRESH_SECONDS
    return seconds if _MIN_REFRESH <= seconds <= _MAX_REFRESH else REFRESH_SECONDS


def _respond(
    environ: WSGIEnvironment,
    start_response: StartResponse,
    status: str,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    extra: Iterable[tuple[str, str]] = (),
    cache: str = "no-store",
) -> Iterable[bytes]:
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", cache),
        *extra,
    ]
    start_response(status, headers)
    return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def make_app(
    registry: CollectorRegistry,
    status: Callable[[], Mapping[str, Any]],
    *,
    authenticator: BasicAuthenticator | None = None,
    snapshot: Callable[[], Snapshot] | None = None,
    runbook_url: str = RUNBOOK_URL,
) -> WSGIApplication:
    """Make the WSGI app serving ``/metrics``, ``/status``, ``/units``, ``/healthz``,
    ``/runbook``, ``/`` and ``/static``.

    Args:
        registry: the registry ``/metrics`` renders (``exporter.make_registry``).
        status: returns the ``/status`` document (JSON-ready); the page renders it too.
        authenticator: basic auth for every path but ``/healthz``; ``None`` for none.
        snapshot: returns the latest snapshot, for ``/units`` (``None``: those paths are 404).
        runbook_url: the runbook the page's crash causes link into (``#<cause>``); by default
            this daemon's own ``/runbook``, relative to the page (so a path prefix of a
            reverse proxy is kept).
    """
    metrics_app = make_metrics_app(registry)  # prometheus_client's app, GETs rendered directly
    static = _static_files()
    runbook_page = functools.cache(_runbook_page)  # rendered once, on the first request

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if (
            authenticator is not None
            and path != "/healthz"
            and not authenticator.is_authorized(environ.get("HTTP_AUTHORIZATION"))
        ):
            authenticator.log_failure(
                environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR"), path
            )
            challenge = ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
            return _respond(
                environ, start_response, "401 Unauthorized", b"Unauthorized\n", extra=[challenge]
            )
        if path == "/metrics":
            return metrics_app(environ, start_response)
        is_units = snapshot is not None and (path == "/units" or path.startswith("/units/"))
        asset = static.get(path.removeprefix("/static/")) if path.startswith("/static/") else None
        known = path in ("/", "/healthz", "/status", RUNBOOK_PATH) or is_units
        if not known and asset is None:
            return _respond(environ, start_response, "404 Not Found", b"Not Found\n")
        if method not in ("GET", "HEAD"):
            return _respond(
                environ,
                start_response,
                "405 Method Not Allowed",
                b"Method Not Allowed\n",
                extra=[("Allow", "GET, HEAD")],
            )
        if path == "/healthz":
            return _respond(environ, start_response, "200 OK", b"ok\n")
        if is_units and snapshot is not None:
            return _units(environ, start_response, path, snapshot())
        if path == RUNBOOK_PATH:
            status_line, body, content_type = runbook_page()
            return _respond(
                environ,
                start_response,
                status_line,
                body,
                content_type=content_type,
                extra=_RUNBOOK_HEADERS,
            )
        if path == "/status":
            body = json.dumps(dict(status()), ensure_ascii=False).encode("utf-8")
            return _respond(
                environ, start_response, "200 OK", body, content_type="application/json"
            )
        if asset is not None:
            body, kind = asset
            return _respond(
                environ,
                start_response,
                "200 OK",
                body,
                content_type=kind,
                cache="public, max-age=3600",  # the page asks for them with ?v=<version>
            )
        query = parse_qs(environ.get("QUERY_STRING", ""))
        document = status()
        if query.get("part") == ["main"]:
            text = render_main(document, runbook_url=runbook_url)
        else:
            text = render_page(
                document,
                version=__version__,
                refresh_seconds=_refresh_seconds(query),
                runbook_url=runbook_url,
            )
        return _respond(
            environ,
            start_response,
            "200 OK",
            text.encode("utf-8"),
            content_type=_HTML,
            extra=_PAGE_HEADERS,
        )

    return app


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(value), ensure_ascii=False).encode("utf-8")


def _units(
    environ: WSGIEnvironment, start_response: StartResponse, path: str, snapshot: Snapshot
) -> Iterable[bytes]:
    """``/units`` (200, every unit) or ``/units/{host}/{unit}`` (its state's status code)."""
    if path == "/units":
        body = _json(units_document(snapshot))
        return _respond(environ, start_response, "200 OK", body, content_type="application/json")
    # PATH_INFO holds the URL-decoded bytes as latin-1 (PEP 3333); names are UTF-8
    rest = path[len("/units/") :].encode("latin-1").decode("utf-8", "replace")
    host, _, unit = rest.partition("/")
    document = find_unit(snapshot, host, unit) if host and unit else None
    if document is None:
        body = _json({"error": "unknown unit", "host": host or None, "unit": unit or None})
        return _respond(
            environ, start_response, "404 Not Found", body, content_type="application/json"
        )
    code = HTTPStatus(HTTP_STATUS[UnitState(document["state"])])
    return _respond(
        environ,
        start_response,
        f"{code.value} {code.phrase}",
        _json(document),
        content_type="application/json",
    )


def _runbook_page() -> tuple[str, bytes, str]:
    """The ``/runbook`` answer: the rendered page, or 404 saying why there is none."""
    from vllm_sentinel.serve.runbook import RunbookMissingError, read_runbook, render_runbook

    try:
        return "200 OK", render_runbook(read_runbook()), "text/html; charset=utf-8"
    except RunbookMissingError as error:
        _log.warning("runbook_missing", detail=str(error))
        body = f"No runbook in this installation: {error}\n".encode()
        return "404 Not Found", body, "text/plain; charset=utf-8"


# --------------------------------------------------------------------------- server


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one client can hold of the exporter before it has even sent a request.

    Attributes:
        max_connections: connections open at once (each holds a thread and a file
            descriptor). When it is reached, the connection that has waited longest for its
            request headers is closed to make room; when every connection is being answered,
            the new one is closed. At most a quarter of the process's file-descriptor limit,
            so the daemon's own files (cursor saves, journalctl pipes) always have room.
        request_read_seconds: the deadline from ``accept`` for the TLS handshake, the request
            line and every header (a client trickling a byte every few seconds is closed).
    """

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_read_seconds: float = DEFAULT_REQUEST_READ_SECONDS


@dataclass(slots=True)
class _Connection:
    accepted_at: float
    reading: bool = True  # still reading the handshake, request line and headers


_ABORTS = (
    "BrokenPipeError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "SSLError",
    "SSLEOFError",
    "SSLZeroReturnError",
    "TimeoutError",
    "OSError",
)


class _ErrorStream(io.StringIO):
    """``wsgi.errors`` of one request: what wsgiref prints there (a traceback when the client
    went away mid-answer) becomes one structured log line, client aborts rate-limited."""

    def __init__(self, client: str, throttle: Throttle) -> None:
        super().__init__()
        self._client = client
        self._throttle = throttle

    def flush(self) -> None:
        text = self.getvalue()
        if not text.strip():
            return
        self.seek(0)
        self.truncate()
        last = text.strip().splitlines()[-1]
        error = last.partition(":")[0].rpartition(".")[2].strip()
        if error in _ABORTS:
            count = self._throttle.admit()
            if count is not None:
                _log.info(
                    "http_connection_aborted",
                    client=self._client,
                    error=error,
                    detail=_printable(last)[:200],
                    aborts=count,
                )
            return
        _log.error("http_request_failed", client=self._client, traceback=text[-4000:])


def _printable(text: str) -> str:
    return "".join(char if char.isprintable() else " " for char in text)


class _RequestHandler(WSGIRequestHandler):
    """Per connection: finish the TLS handshake here (not in ``accept``), log nothing, name
    the server ``vllm-sentinel/<version>``; tell the server once the request is read."""

    timeout = 30.0
    server: _Server

    def version_string(self) -> str:
        """The ``Server:`` header of errors the HTTP layer answers itself (a bad request)."""
        return SERVER_NAME

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def parse_request(self) -> bool:
        """Parse the request line and headers; from here on the read deadline is over."""
        parsed = super().parse_request()
        if parsed:
            self.server.request_read(self.request)
        return parsed

    def get_stderr(self) -> _ErrorStream:
        """``wsgi.errors``: one structured line per failure, never a raw traceback."""
        return _ErrorStream(str(self.client_address[0]), self.server.aborts)

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing: requests carry credentials and are too many to log."""


def _named(app: WSGIApplication) -> WSGIApplication:
    """``app`` with ``Server: vllm-sentinel/<version>`` on every response (wsgiref adds its
    own, naming the Python version, only where the application set none)."""

    def named(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers = [(k, v) for k, v in headers if k.lower() != "server"]
            headers.append(("Server", SERVER_NAME))
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return named


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # listen backlog: a scrape is not dropped behind slow clients
    limits = ConnectionLimits()

    def server_activate(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[Any, _Connection] = {}
        self.aborts = Throttle(AUTH_FAILURE_LOG_INTERVAL_SECONDS)
        self._limited = Throttle(AUTH_FAILURE_LOG_INTERVAL_SECONDS)
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Admit a connection within ``limits.max_connections`` (see ``ConnectionLimits``)."""
        now = time.monotonic()
        refused = limited = False
        with self._lock:
            if len(self._connections) >= self.limits.max_connections:
                limited = True
                waiting = [(c.accepted_at, s) for s, c in self._connections.items() if c.reading]
                if waiting:
                    _, oldest = min(waiting, key=lambda item: item[0])
                    self._connections.pop(oldest)
                    _cut(oldest)
                else:
                    refused = True
            if not refused:
                self._connections[request] = _Connection(now)
        if limited:
            count = self._limited.admit()
            if count is not None:
                _log.warning(
                    "http_connections_limited",
                    max_connections=self.limits.max_connections,
                    closed=count,
                    detail="the connection waiting longest for its request was closed (or the "
                    "new one, when all are being answered); counted since the last line",
                )
        if refused:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def request_read(self, request: Any) -> None:
        """The handler read its request: the read deadline no longer applies."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is not None:
                connection.reading = False

    def service_actions(self) -> None:
        """Between two polls of ``serve_forever`` (0.1 s): close connections whose request
        is not read within ``limits.request_read_seconds`` of ``accept``."""
        deadline = time.monotonic() - self.limits.request_read_seconds
        with self._lock:
            late = [
                s for s, c in self._connections.items() if c.reading and c.accepted_at < deadline
            ]
            for request in late:
                self._connections[request].reading = False  # cut once
        for request in late:
            _cut(request)

    def close_request(self, request: Any) -> None:
        with self._lock:
            self._connections.pop(request, None)
        super().close_request(request)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn (a DNS lookup); skip it.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Failed handshakes, resets and timeouts: the client's problem, not ours.
        _log.debug("http_connection_failed", client=str(client_address[0]))


def _cut(request: Any) -> None:
    """Shut a connection down under the thread reading it (its read returns at once); the
    thread then closes it. The plain socket's shutdown, so the TLS object is left alone."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(request, socket.SHUT_RDWR)


def _fd_budget(wanted: int) -> int:
    """``wanted`` connections, at most a quarter of the soft file-descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 4))


class _Server6(_Server):
    address_family = socket.AF_INET6


class ServerHandle:
    """A running server: its bound address, and a way to stop it."""

    def __init__(self, server: _Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def host(self) -> str:
        """The address bound."""
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        """The port bound (the real one when 0 was asked for)."""
        return int(self._server.server_address[1])

    def shutdown(self) -> None:
        """Stop serving, close the socket and wait for the serving thread (blocking)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        _log.info("http_server_stopped", host=self.host, port=self.port)


def _family(host: str, port: int) -> socket.AddressFamily:
    if not host:  # "" is every IPv4 interface (config.parse_listen_address)
        return socket.AF_INET
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


def start_http_server(
    listen_host: str,
    listen_port: int,
    app: WSGIApplication,
    ssl_context: ssl.SSLContext | None = None,
    limits: ConnectionLimits | None = None,
) -> ServerHandle:
    """Bind and serve ``app`` on a daemon thread; port 0 picks a free port.

    ``limits`` bound what clients can hold before their request is read (``ConnectionLimits``;
    default: 64 connections, 10 s to send the request headers, TLS handshake included).

    ``listen_host`` is an address or name (IPv6 without brackets); ``""`` is every IPv4
    interface. Call ``shutdown()`` from a thread (``asyncio.to_thread``): it blocks briefly.

    Raises:
        OSError: the address cannot be bound.
    """
    server_class = _Server6 if _family(listen_host, listen_port) == socket.AF_INET6 else _Server
    limits = limits or ConnectionLimits()
    server = server_class((listen_host, listen_port), _RequestHandler, bind_and_activate=False)
    server.limits = ConnectionLimits(
        _fd_budget(limits.max_connections), limits.request_read_seconds
    )
    try:
        server.server_bind()
        server.server_activate()
    except BaseException:
        server.server_close()
        raise
    if ssl_context is not None:
        server.socket = ssl_context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
        server.base_environ["HTTPS"] = "on"
    server.set_app(_named(app))
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="vllm-sentinel-http",
        daemon=True,
    )
    thread.start()
    handle = ServerHandle(server, thread)
    _log.info(
        "http_server_started",
        host=handle.host,
        port=handle.port,
        tls=ssl_context is not None,
        max_connections=server.limits.max_connections,
    )
    return handle
