"""A TCP proxy on 127.0.0.1 that can make a host stop answering (a blackhole), for tests.

``BlackholeProxy(target_port)`` (``async with``) forwards every connection to
``127.0.0.1:target_port``. ``blackhole()`` makes the far side go silent the way a crashed
host or a cut cable does: bytes in both directions are read and thrown away, no FIN or RST is
sent, and new connections are accepted but never answered (so an SSH handshake hangs).
``restore()`` brings the host back: connections that lived through the blackhole are closed
(their peer state is lost, as after a reboot) and new ones are forwarded again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

__all__ = ["BlackholeProxy"]

_READ_SIZE = 1 << 16


@dataclass(slots=True, eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None
    broken: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


class BlackholeProxy:
    """Forward 127.0.0.1:``port`` → 127.0.0.1:``target_port`` until told to go silent."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.accepted_total = 0
        self._silent = False
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @property
    def is_silent(self) -> bool:
        """True while the proxy swallows everything."""
        return self._silent

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
            for task in link.tasks:
                task.cancel()
            await asyncio.gather(*link.tasks, return_exceptions=True)
        self._links.clear()
        if self._server is not None:
            await self._server.wait_closed()

    def blackhole(self) -> None:
        """Stop answering: swallow all traffic of open and new connections."""
        self._silent = True
        for link in self._links:
            link.broken = True

    def restore(self) -> None:
        """Answer again: close the connections that went through the blackhole."""
        self._silent = False
        for link in [link for link in self._links if link.broken]:
            link.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted_total += 1
        link = _Link(writer, None, broken=self._silent)
        self._links.add(link)
        try:
            if link.broken:
                await _swallow(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return
            link.upstream = up_writer
            link.tasks = [
                asyncio.ensure_future(self._pipe(reader, up_writer, link)),
                asyncio.ensure_future(self._pipe(up_reader, writer, link)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.close()
            self._links.discard(link)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := await source.read(_READ_SIZE):
                if link.broken:
                    continue  # the host is silent: the bytes go nowhere
                sink.write(chunk)
                await sink.drain()
        if not link.broken:
            link.close()  # an ordinary close on one side closes the other


async def _swallow(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError):
        while await reader.read(_READ_SIZE):
            pass
