"""``LineBuffer``: byte chunks → whole lines, with a bounded partial line (core: pure).

Both decoders read bytes in any chunking (a pipe, an SSH channel, a file read in MiB blocks).
The buffer hands back the line completed by the chunk's first newline and the block of whole
lines after it (one ``bytes`` without its final newline: the text decoder decodes a block at
once), and keeps the tail for the next chunk. A line longer than ``max_line_bytes`` never makes
the buffer grow past that: its first ``max_line_bytes`` are kept (``keep_truncated``) or the
whole line is dropped, and each such line is counted once in ``overflows``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

__all__ = ["NUL_GAP", "LineBuffer", "NulGaps"]

# A run of NUL bytes: the gap left in a file truncated while its writer kept writing at its old
# offset (logrotate's copytruncate; a second `cmd > file` over a running server's log: the
# filesystem fills the hole with zeros). Text never holds such a run; an isolated NUL (a crashed
# writer's partial line, UTF-16 without its byte-order mark) is not one.
NUL_GAP = re.compile(rb"\x00{8,}")


class NulGaps:
    """Read each ``NUL_GAP`` run in a byte stream as one line break, and count them.

    ``bytes_total`` and ``runs`` count exactly, whatever the chunking: a run split across
    chunks is held back until it ends (it counts once).
    """

    def __init__(self) -> None:
        self.bytes_total = 0
        self.runs = 0

    def close(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` with every gap replaced by ``b"\\n"``."""
        held = b""
        for piece in chunks:
            chunk = held + piece if held else piece
            held = b""
            if b"\x00" not in chunk:
                yield chunk
                continue
            stripped = chunk.rstrip(b"\x00")
            held = chunk[len(stripped) :]
            yield NUL_GAP.sub(self._count, stripped)
        if held:
            yield NUL_GAP.sub(self._count, held) if len(held) >= 8 else held

    def _count(self, match: re.Match[bytes]) -> bytes:
        self.bytes_total += match.end() - match.start()
        self.runs += 1
        return b"\n"


class LineBuffer:
    """Split byte chunks into lines with a bounded pending tail.

    Args:
        max_line_bytes: the longest line kept whole.
        keep_truncated: keep the first ``max_line_bytes`` of a longer line (text: still worth
            reading) instead of dropping it (JSON: a cut object cannot be parsed).
    """

    def __init__(self, max_line_bytes: int, *, keep_truncated: bool) -> None:
        self.max_line_bytes = max_line_bytes
        self._keep = keep_truncated
        self._pending = bytearray()
        self._overflowing = False
        self.overflows = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of the partial line held (never more than ``max_line_bytes``)."""
        return len(self._pending)

    def push(self, chunk: bytes) -> tuple[bytes | None, bytes | None]:
        """Add ``chunk``; return ``(completed, block)``.

        ``completed`` is the pending line the chunk's first newline ends (``None`` when no
        line was pending, or when it was dropped for being too long); ``block`` is every
        further whole line, joined by newlines, without the final newline (``None`` when the
        chunk has no further newline). Lines in ``block`` may be longer than the limit: the
        caller cuts or drops them (``is_too_long``) as it reads them.
        """
        start = 0
        completed: bytes | None = None
        if self._pending or self._overflowing:
            end = chunk.find(b"\n")
            if end < 0:
                self._hold(chunk)
                return None, None
            overflowed = self._overflowing
            self._hold(chunk[:end])
            if self._keep or (not overflowed and not self._overflowing):
                completed = bytes(self._pending)
            self._pending.clear()
            self._overflowing = False
            start = end + 1
        last = chunk.rfind(b"\n")
        if last < start:
            self._hold(chunk[start:])
            return completed, None
        block = chunk[start:last]
        self._hold(chunk[last + 1 :])
        return completed, block

    def flush(self) -> bytes | None:
        """End of input: the partial line without its newline, if any (and if kept)."""
        overflowed = self._overflowing
        piece = bytes(self._pending) if self._pending and (self._keep or not overflowed) else None
        self._pending.clear()
        self._overflowing = False
        return piece

    def is_too_long(self, line: bytes) -> bool:
        """Count and say whether a line of a block exceeds the limit."""
        if len(line) > self.max_line_bytes:
            self.overflows += 1
            return True
        return False

    def _hold(self, data: bytes) -> None:
        if self._overflowing or not data:
            return
        room = self.max_line_bytes - len(self._pending)
        if len(data) > room:
            if self._keep:
                self._pending += data[: max(room, 0)]
            else:
                self._pending.clear()
            self._overflowing = True
            self.overflows += 1
        else:
            self._pending += data
