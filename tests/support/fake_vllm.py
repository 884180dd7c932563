"""A stand-in for vLLM's HTTP server in tests: ``/health`` and ``/v1/models`` as scripted.

``FakeVllmServer`` is a real stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (or a Unix socket).
Its ``/health`` does what ``mode`` says at the time of the request:

* ``ok`` — 200 with an empty body (vLLM's answer while its engine is alive);
* ``unavailable`` — 503 (vLLM's answer once its engine died, ``EngineDeadError``);
* ``hang`` — reads the request and never answers (a bound socket not served yet, a hung
  server) until the mode changes or the server stops;
* ``reset`` — closes the connection with a TCP reset (``SO_LINGER`` 0) without answering;
* ``garbage`` — answers bytes that are not HTTP.

``/v1/models`` lists ``models`` in OpenAI's shape. Every request is counted per path, and
``max_in_flight`` records the most requests in flight at once whose client still holds its
connection (the probe keeps one per unit; a handler thread a loaded machine has not run since
its client gave up does not count).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import socketserver
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

__all__ = ["FakeVllmServer"]

MODES = ("ok", "unavailable", "hang", "reset", "garbage")


def _peer_closed(connection: socket.socket) -> bool:
    """Whether the client closed ``connection`` (readable at end of stream, or gone)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and not connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (OSError, ValueError):
        return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server  # type: ignore[assignment]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        owner = self.server.owner
        with owner.lock:
            owner.requests[self.path] = owner.requests.get(self.path, 0) + 1
            # a request whose client already closed its connection (a probe that timed out) is
            # no longer the client's, though its handler thread may not have run since
            owner.open_requests = {c for c in owner.open_requests if not _peer_closed(c)}
            owner.open_requests.add(self.connection)
            owner.in_flight = len(owner.open_requests)
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            if self.path == "/health":
                self._health(owner)
            elif self.path == "/v1/models":
                body = json.dumps(
                    {
                        "object": "list",
                        "data": [
                            {"id": name, "object": "model", "root": name, "owned_by": "vllm"}
                            for name in owner.models
                        ],
                    }
                ).encode()
                self._answer(200, body, "application/json")
            else:
                self._answer(404, b'{"detail":"Not Found"}', "application/json")
        finally:
            with owner.lock:
                owner.open_requests.discard(self.connection)
                owner.in_flight = len(owner.open_requests)

    def _health(self, owner: FakeVllmServer) -> None:
        mode = owner.mode
        if mode == "ok":
            self._answer(200, b"", "text/plain")
        elif mode == "unavailable":
            self._answer(503, b"", "text/plain")
        elif mode == "hang":
            # answer nothing; the request counts as in flight until the client gives up
            # (closes) or the mode changes
            version = owner.changed.version
            while owner.changed.version == version:
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    break
            self.close_connection = True
        elif mode == "reset":
            with contextlib.suppress(OSError):
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
            self.close_connection = True
        else:
            with contextlib.suppress(OSError):
                self.wfile.write(b"\x00\x01 this is not HTTP\r\n\r\n")
            self.close_connection = True

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            super().handle()

    def address_string(self) -> str:
        return "unix" if isinstance(self.client_address, str | bytes) else super().address_string()


class _ModeChange:
    """Wakes hanging requests when the mode changes or the server stops."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._version = 0

    def bump(self) -> None:
        with self._condition:
            self._version += 1
            self._condition.notify_all()

    @property
    def version(self) -> int:
        with self._condition:
            return self._version


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: FakeVllmServer


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    owner: FakeVllmServer


class FakeVllmServer:
    """vLLM's ``/health`` and ``/v1/models`` on 127.0.0.1 (or ``unix_path``), as scripted.

    Attributes (after ``start``): ``port`` (0 for a Unix socket), ``url``.
    """

    def __init__(
        self,
        mode: str = "ok",
        *,
        models: tuple[str, ...] = ("Qwen/Qwen3-8B",),
        unix_path: Path | None = None,
    ) -> None:
        self._mode = mode
        self.models = models
        self.unix_path = unix_path
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.open_requests: set[socket.socket] = set()
        self.changed = _ModeChange()
        self.port = 0
        self._server: _Server | _UnixServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def mode(self) -> str:
        """What ``/health`` does now."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self._mode = value
        self.changed.bump()

    @property
    def url(self) -> str:
        return f"unix:{self.unix_path}" if self.unix_path else f"http://127.0.0.1:{self.port}"

    def count(self, path: str) -> int:
        """Requests received for ``path`` so far."""
        with self.lock:
            return self.requests.get(path, 0)

    def start(self) -> None:
        server: _Server | _UnixServer
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)
            server = _UnixServer(str(self.unix_path), _Handler)
        else:
            server = _Server(("127.0.0.1", 0), _Handler)
            self.port = int(server.server_address[1])
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, wake hanging requests, close the socket."""
        server = self._server
        if server is None:
            return
        self.changed.bump()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
