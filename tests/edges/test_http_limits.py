"""Unauthenticated connection exhaustion (issue 22 defect 2), on loopback with real TLS: slow
clients that never finish their request cannot starve authenticated scrapes, nor the daemon's
own file descriptors."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.limited_server import PASSWORD, USER
from tests.support.tls import write_self_signed

ROOT = Path(__file__).resolve().parents[2]
SLOW_CLIENTS = 250  # twice the child's 128 file descriptors
SCRAPES = 10


async def _slow_client(port: int, context: ssl.SSLContext, stop: asyncio.Event) -> int:
    """Hold a TLS connection, trickling a header byte every 0.5 s, reconnecting when cut;
    return how many times the server closed it."""
    cut = 0
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        except (OSError, ssl.SSLError):
            cut += 1
            await asyncio.sleep(0.2)
            continue
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\n")
            while not stop.is_set():
                writer.write(b"X")
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                        break
                except TimeoutError:
                    continue
        except (OSError, ssl.SSLError):
            pass
        finally:
            cut += 1
            writer.close()
        await asyncio.sleep(0.5)  # then holds a new one: a slow client, not a flood
    return cut


def _scrape(port: int, context: ssl.SSLContext) -> int:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Basic {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=15, context=context) as response:
            response.read()
            return int(response.status)
    except OSError as error:
        return getattr(error, "code", 0) or 0


@pytest.mark.asyncio
async def test_authenticated_scrapes_are_served_while_slow_clients_hold_connections(
    tmp_path: Path,
) -> None:
    """250 TLS clients trickling header bytes (no credentials) against a daemon limited to 128
    fds: all 10 authenticated scrapes answer 200, the slow clients are cut by the 2 s read
    deadline or the connection cap, no state save fails with EMFILE, and the aborted
    connections print no traceback."""
    cert, key = write_self_signed(tmp_path)
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        # (ASYNC220) the child runs beside the loop; its two stdout lines are read at known points
        child = subprocess.Popen(  # noqa: ASYNC220
            [
                sys.executable,
                "-m",
                "tests.support.limited_server",
                str(cert),
                str(key),
                str(tmp_path),
                "2",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        context = ssl.create_default_context(cafile=str(cert))
        stop = asyncio.Event()
        clients = [
            asyncio.ensure_future(_slow_client(port, context, stop)) for _ in range(SLOW_CLIENTS)
        ]
        await asyncio.sleep(3.0)  # let them take every slot first
        statuses = []
        for _ in range(SCRAPES):  # spread over the attack, not one burst
            statuses.append(await asyncio.to_thread(_scrape, port, context))
            await asyncio.sleep(0.3)
        stop.set()
        cuts = await asyncio.gather(*clients)
        child.stdin.close()
        counts = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
    assert statuses == [200] * SCRAPES
    assert sum(cuts) >= SLOW_CLIENTS  # every slow client was closed at least once
    assert counts["save_failures"] == 0 and counts["saves"] > 0
    # clients that went away mid-TLS are one structured, rate-limited line, never a traceback
    text = errors.read_text()
    assert "Traceback" not in text
    assert text.count("http_connection_aborted") <= 2
