"""``CursorStore``: the last applied journal cursor per host, kept across restarts (edge).

The Monitor marks a host's cursor only after the tracker applied the batch it ends; ``flush``
writes the marked cursors atomically (temp file, fsync, rename, fsync of the directory), so a
crash leaves either the old or the new cursor, never a torn file. Writes are coalesced: the
daemon flushes at a bounded interval and once on shutdown. Re-applying records after a crash
is harmless: the tracker ignores cursors it has already applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path

import structlog

__all__ = ["CursorStore"]

_SAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_log = structlog.get_logger("vllm_sentinel.cursors")


class CursorStore:
    """Cursors in ``directory/<host>.cursor``.

    Args:
        directory: the state directory (systemd ``StateDirectory=``); created if missing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._marked: dict[str, str] = {}
        self._dirty: set[str] = set()

    def _path(self, host: str) -> Path:
        return self.directory / f"{_SAFE.sub('_', host)}.cursor"

    def load(self, host: str) -> str | None:
        """The stored cursor of ``host``, or ``None`` (none stored, or unreadable)."""
        try:
            text = self._path(host).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except OSError as error:
            _log.warning("cursor_unreadable", host=host, error=str(error))
            return None
        return text or None

    def mark(self, host: str, cursor: str) -> None:
        """Remember ``cursor`` as applied for ``host`` (written at the next flush)."""
        if self._marked.get(host) != cursor:
            self._marked[host] = cursor
            self._dirty.add(host)

    def marked(self, host: str) -> str | None:
        """The last cursor marked for ``host`` in this run."""
        return self._marked.get(host)

    async def flush(self) -> int:
        """Write every changed cursor atomically; return how many were written."""
        if not self._dirty:
            return 0
        pending = {host: self._marked[host] for host in self._dirty}
        self._dirty.clear()
        try:
            await asyncio.to_thread(self._write_all, pending)
        except OSError as error:
            self._dirty.update(pending)
            _log.error("cursor_save_failed", directory=str(self.directory), error=str(error))
            return 0
        return len(pending)

    def flush_sync(self) -> int:
        """The same as ``flush``, for shutdown paths without an event loop."""
        pending = {host: self._marked[host] for host in self._dirty}
        self._dirty.clear()
        self._write_all(pending)
        return len(pending)

    def _write_all(self, pending: dict[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for host, cursor in pending.items():
            target = self._path(host)
            temporary = target.with_suffix(f".cursor.tmp{os.getpid()}")
            with open(temporary, "w", encoding="utf-8") as stream:
                stream.write(cursor + "\n")
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):
                os.fsync(directory)
        finally:
            os.close(directory)
