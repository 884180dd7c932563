"""``CursorStore``: the last applied journal cursor per host, kept across restarts (edge).

The Monitor marks a host's cursor only after the tracker applied the batch it ends; ``flush``
writes the marked cursors atomically (a unique temporary file in the state directory, fsync,
rename, fsync of the directory), so a crash leaves either the old or the new cursor, never a
torn file. Writes are coalesced: the daemon flushes at a bounded interval and once on
shutdown. One flush writes at a time: a flush waits for the one in flight (the periodic
flush cancelled on shutdown keeps writing in its worker thread), and a write that fails keeps
its cursors pending for the next flush. Re-applying records after a crash is harmless: the
tracker ignores cursors it has already applied.

A file holds the cursor, and after it ``unsettled_since=<µs>`` while a crash the Monitor
applied is not counted yet (see ``load_unsettled_since``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

__all__ = ["CursorStore"]

_SAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_UNSETTLED = "unsettled_since="
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_log = structlog.get_logger("vllm_sentinel.cursors")


class CursorStore:
    """Cursors in ``directory/<host>.cursor``.

    ``mark`` and the flushes may be called from different threads.

    Args:
        directory: the state directory (systemd ``StateDirectory=``); created if missing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._marked: dict[str, str] = {}
        self._unsettled: dict[str, datetime | None] = {}
        self._dirty: set[str] = set()
        self._state_lock = threading.Lock()  # _marked and _dirty
        self._write_lock = threading.Lock()  # one writer of the files at a time
        self._in_flight: asyncio.Future[int] | None = None

    def _path(self, host: str) -> Path:
        return self.directory / f"{_SAFE.sub('_', host)}.cursor"

    def _lines(self, host: str) -> list[str]:
        try:
            return self._path(host).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as error:
            _log.warning("cursor_unreadable", host=host, error=str(error))
            return []

    def load(self, host: str) -> str | None:
        """The stored cursor of ``host``, or ``None`` (none stored, or unreadable)."""
        lines = self._lines(host)
        return (lines[0].strip() or None) if lines else None

    def load_unsettled_since(self, host: str) -> datetime | None:
        """When the earliest crash still uncounted at the last save ended (UTC), or ``None``.

        Its records are before the stored cursor, yet the next run must count the crash: the
        run that saw it stopped before the crash settled (``UnitTracker`` counts a crash once
        its cause is settled, ``settle_seconds`` after its end).
        """
        for line in self._lines(host)[1:]:
            if line.startswith(_UNSETTLED) and line[len(_UNSETTLED) :].isdecimal():
                micros = int(line[len(_UNSETTLED) :])
                with contextlib.suppress(OverflowError):
                    return _EPOCH + timedelta(microseconds=micros)
        return None

    def mark(self, host: str, cursor: str, unsettled_since: datetime | None = None) -> None:
        """Remember ``cursor`` as applied for ``host`` (written at the next flush), and when
        the earliest crash applied but not yet counted ended (``None``: no such crash)."""
        with self._state_lock:
            if self._marked.get(host) != cursor or self._unsettled.get(host) != unsettled_since:
                self._marked[host] = cursor
                self._unsettled[host] = unsettled_since
                self._dirty.add(host)

    def marked(self, host: str) -> str | None:
        """The last cursor marked for ``host`` in this run."""
        return self._marked.get(host)

    async def flush(self) -> int:
        """Write every changed cursor atomically, in a worker thread.

        A flush still in flight (its caller may have been cancelled; its thread goes on) is
        waited for first, so the last flush called writes last.

        Returns:
            How many cursors were written; 0 when nothing changed or the write failed
            (``cursor_save_failed`` is logged and the cursors stay pending for the next flush).
        """
        previous = self._in_flight
        if previous is not None and not previous.done():
            # wait without taking over its outcome; our own cancellation still propagates
            await asyncio.wait({previous})
        if not self._dirty:
            return 0
        flight = asyncio.ensure_future(asyncio.to_thread(self.flush_sync))
        self._in_flight = flight
        return await asyncio.shield(flight)

    def flush_sync(self) -> int:
        """The same as ``flush``, for threads and shutdown paths without an event loop.

        Blocks while another flush writes. Returns how many cursors were written (0 on a
        failed write, whose cursors stay pending); never raises ``OSError``.
        """
        with self._write_lock:
            with self._state_lock:
                pending = {host: self._text(host) for host in self._dirty}
                self._dirty.clear()
            if not pending:
                return 0
            try:
                self._write_all(pending)
            except OSError as error:
                with self._state_lock:
                    self._dirty.update(pending)  # newer marks are dirty already
                _log.error("cursor_save_failed", directory=str(self.directory), error=str(error))
                return 0
            return len(pending)

    def _text(self, host: str) -> str:
        """The file's content: the cursor, then ``unsettled_since=<µs since the epoch>``."""
        text = self._marked[host] + "\n"
        unsettled = self._unsettled.get(host)
        if unsettled is not None:
            micros = (unsettled - _EPOCH) // timedelta(microseconds=1)
            text += f"{_UNSETTLED}{micros}\n"
        return text

    def _write_all(self, pending: dict[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for host, text in pending.items():
            target = self._path(host)
            descriptor, temporary = tempfile.mkstemp(
                prefix=f".{target.name}.", suffix=".tmp", dir=self.directory
            )
            try:
                with open(descriptor, "w", encoding="utf-8") as stream:
                    stream.write(text)
                    stream.flush()
                    os.fsync(stream.fileno())
                os.replace(temporary, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):
                os.fsync(directory)
        finally:
            os.close(directory)
