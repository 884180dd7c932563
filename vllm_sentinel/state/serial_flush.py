"""``SerialFlush``: a store's blocking flush run in a worker thread, one at a time (edge).

The state stores (``cursors.CursorStore``, ``history.HistoryStore``) write their files with a
blocking ``flush_sync`` (``atomic_file``: fsync, rename) that must not run on the event loop,
and must not run twice at once. ``SerialFlush`` is their ``async flush``: it waits for the
flush in flight, if any (its caller may have been cancelled, as the periodic flush is on
shutdown, while its thread goes on writing), so that the last flush called writes last; then,
when the store has something pending, it runs ``flush_sync`` in a worker thread. A caller
cancelled while it waits is cancelled (nothing runs for it); one cancelled while its flush runs
leaves the thread writing, shielded, for the next caller to wait for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["SerialFlush"]


class SerialFlush:
    """``await flush()``: ``flush_sync()`` in a worker thread, after the one in flight."""

    def __init__(self, flush_sync: Callable[[], int], pending: Callable[[], bool]) -> None:
        """``flush_sync`` writes what is pending and returns how many files it wrote;
        ``pending`` says whether there is anything to write."""
        self._flush_sync = flush_sync
        self._pending = pending
        self._in_flight: asyncio.Future[int] | None = None

    async def __call__(self) -> int:
        """Wait for the flush in flight, then flush if anything is pending.

        Returns:
            What ``flush_sync`` returned; 0 when nothing was pending.
        """
        previous = self._in_flight
        if previous is not None and not previous.done():
            # wait without taking over its outcome; our own cancellation still propagates
            await asyncio.wait({previous})
        if not self._pending():
            return 0
        flight = asyncio.ensure_future(asyncio.to_thread(self._flush_sync))
        self._in_flight = flight
        return await asyncio.shield(flight)
