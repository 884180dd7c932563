"""A child process serving the real exporter app with TLS and basic auth under a small
file-descriptor limit, writing a state file (like a cursor save) all along.

Run as ``python -m tests.support.limited_server CERT KEY STATE_DIR READ_SECONDS``: it sets
``RLIMIT_NOFILE`` to 256, prints its port, saves ``STATE_DIR/cursor`` atomically every 50 ms
until its stdin closes, then prints ``{"saves": N, "save_failures": M}`` and exits.
"""

from __future__ import annotations

import json
import resource
import ssl
import sys
import threading
import time
from pathlib import Path

import bcrypt
import structlog

from tests.support.snapshots import basic_snapshot
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import (
    BasicAuthenticator,
    ConnectionLimits,
    make_app,
    start_http_server,
)
from vllm_sentinel.state.atomic_file import write_atomically

USER, PASSWORD = "prometheus", "scrape-secret"
FD_LIMIT = 128


def main() -> None:
    cert, key, state, read_seconds = sys.argv[1:5]
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout: ours
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (FD_LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    users = {USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}
    registry = make_registry(SentinelCollector(basic_snapshot))
    app = make_app(registry, lambda: {}, authenticator=BasicAuthenticator(users))
    handle = start_http_server(
        "127.0.0.1", 0, app, context, ConnectionLimits(request_read_seconds=float(read_seconds))
    )
    counts = {"saves": 0, "save_failures": 0}
    done = threading.Event()

    def save() -> None:
        while not done.is_set():
            try:
                write_atomically(Path(state) / "cursor", b"s=1;i=1")
                counts["saves"] += 1
            except OSError:
                counts["save_failures"] += 1
            time.sleep(0.05)

    saver = threading.Thread(target=save)
    saver.start()
    print(handle.port, flush=True)
    sys.stdin.read()
    done.set()
    saver.join()
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
