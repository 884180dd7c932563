"""Journal cursors already applied, so that re-reading after a reconnect is harmless (core: pure).

A journald cursor is ``s=<seqnum id>;i=<seqnum hex>;b=…;m=…;t=…;x=…``. Within one seqnum id
(one journal file series) sequence numbers only grow, so remembering the highest seqnum per id
is enough to recognise every record already applied, at constant memory. Cursors of another
shape fall back to a small window of the last ones seen.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Final

__all__ = ["SeenCursors"]

_CURSOR_SEQ: Final = re.compile(r"s=([0-9a-f]+);i=([0-9a-f]+)")
_SEQNUM_AT: Final = re.compile(r"[0-9a-f]+(?=;|\Z)").match  # i=<these>;… or at the end
_MAX_SEQNUM_IDS: Final = 64


class SeenCursors:
    """Which cursors were applied: the highest seqnum per seqnum id, and a recent window."""

    def __init__(self) -> None:
        self._seen_seq: dict[str, int] = {}
        self._recent: deque[str] = deque(maxlen=64)
        self._prefix = ""  # "s=<seqnum id>;i=" of the last cursor read, and the id
        self._seqnum_id = ""

    def seen(self, cursor: str) -> bool:
        """True when ``cursor`` (or a later one of its series) was seen; else remember it."""
        prefix = self._prefix
        if prefix and cursor.startswith(prefix):
            # Hot path: the same journal file as the last record ("s=<id>;i=<seqnum>;…"): the
            # seqnum's hex digits up to the next field (one regex call, no find/slice/strip)
            digits = _SEQNUM_AT(cursor, len(prefix))
            if digits is not None:
                seqnum = int(digits.group(), 16)
                last = self._seen_seq.get(self._seqnum_id)
                if last is not None:
                    if seqnum <= last:
                        return True
                    self._seen_seq[self._seqnum_id] = seqnum
                    return False
                return self._is_seen(self._seqnum_id, seqnum)
        found = _CURSOR_SEQ.search(cursor)
        if found is None:
            if cursor in self._recent:
                return True
            self._recent.append(cursor)
            return False
        if found.start() == 0:
            self._prefix = cursor[: found.start(2)]
            self._seqnum_id = found.group(1)
        return self._is_seen(found.group(1), int(found.group(2), 16))

    def _is_seen(self, seqnum_id: str, seqnum: int) -> bool:
        last = self._seen_seq.get(seqnum_id)
        if last is not None and seqnum <= last:
            return True
        if last is None and len(self._seen_seq) >= _MAX_SEQNUM_IDS:
            del self._seen_seq[next(iter(self._seen_seq))]
        self._seen_seq[seqnum_id] = seqnum
        return False
