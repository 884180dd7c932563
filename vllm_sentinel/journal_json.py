"""``JournalJsonDecoder``: ``journalctl -o json`` bytes → records (core: pure, no I/O).

One JSON object per line (journalctl(1), "json" output). How journald renders fields there
(systemd.journal-fields(7), journalctl(1)):

* a field with invalid UTF-8 **or any control character** (ANSI colour, ``\\r``) is an array
  of byte values — most vLLM worker lines up to 0.11 arrive this way;
* a field of 4096 bytes or more is ``null`` unless journalctl ran with ``--all`` (``-a``);
* a field repeated within one entry is an array of strings;
* numbers are strings; ``__CURSOR`` and ``__REALTIME_TIMESTAMP`` (µs since the epoch) are
  always there.

Messages systemd (PID 1) writes about a unit carry ``UNIT=`` (``USER_UNIT=``) and
``INVOCATION_ID=`` and usually a ``MESSAGE_ID``; the service's own lines carry
``_SYSTEMD_UNIT`` and ``_SYSTEMD_INVOCATION_ID``.

Never raises on input: each line that cannot become a record is counted in ``skipped`` by
reason (``invalid_json``, ``not_an_object``, ``no_message``, ``line_too_long``) and
dropped; fields of the wrong type are ignored and counted (``invalid_field``).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import orjson

from vllm_sentinel.record import Record

__all__ = ["JournalJsonDecoder", "decode_field"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MESSAGE = 1 << 20


def decode_field(value: object) -> str | None:
    """Turn one ``-o json`` field value into text.

    Args:
        value: a string, a list of byte values (0–255), a list of strings (repeated field,
            the last one wins), a number, or ``None``.

    Returns:
        The text (invalid UTF-8 replaced with U+FFFD), or ``None`` for ``null`` and for
        values of no usable shape.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if not value:
            return ""
        if all(isinstance(item, int) and 0 <= item <= 255 for item in value):
            return bytes(value).decode("utf-8", errors="replace")  # type: ignore[arg-type]
        if all(isinstance(item, str) for item in value):
            return str(value[-1])
        if all(isinstance(item, list) for item in value):
            return decode_field(value[-1])
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


class JournalJsonDecoder:
    """Decode ``journalctl -o json`` output into ``Record``s.

    Args:
        host: the host name put on every record.
        max_line_bytes: a JSON line longer than this is dropped (``line_too_long``).
    """

    def __init__(self, host: str | None = None, *, max_line_bytes: int = 4 << 20) -> None:
        self.host = host
        self._max = max_line_bytes
        self._pending = bytearray()
        self._discarding = False
        self.skipped: Counter[str] = Counter()
        self.last_cursor: str | None = None
        self.lines_total = 0

    def feed(self, chunk: bytes) -> list[Record]:
        """Decode every complete line in ``chunk``."""
        records: list[Record] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._buffer(chunk[start:])
                return records
            if self._pending or self._discarding:
                discarding = self._discarding
                self._buffer(chunk[start:end])
                piece = bytes(self._pending)
                self._pending.clear()
                self._discarding = False
                if discarding:
                    start = end + 1
                    continue
            else:
                piece = chunk[start:end]
                if len(piece) > self._max:
                    self.skipped["line_too_long"] += 1
                    start = end + 1
                    continue
            record = self.decode_line(piece)
            if record is not None:
                records.append(record)
            start = end + 1

    def flush(self) -> list[Record]:
        """Decode a last line without newline (end of input)."""
        if self._discarding or not self._pending:
            self._pending.clear()
            self._discarding = False
            return []
        piece = bytes(self._pending)
        self._pending.clear()
        record = self.decode_line(piece)
        return [record] if record is not None else []

    def _buffer(self, data: bytes) -> None:
        if self._discarding or not data:
            return
        if len(self._pending) + len(data) > self._max:
            self._pending.clear()
            self._discarding = True
            self.skipped["line_too_long"] += 1
        else:
            self._pending += data

    def decode_line(self, line: bytes) -> Record | None:
        """Decode one JSON line; ``None`` (and a count in ``skipped``) if it is no record."""
        if not line.strip():
            return None
        self.lines_total += 1
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.startswith(b"-- cursor: "):
                return None  # --show-cursor trailer
            self.skipped["invalid_json"] += 1
            return None
        if not isinstance(entry, dict):
            self.skipped["not_an_object"] += 1
            return None
        return self.decode_entry(entry)

    def decode_entry(self, entry: dict[str, object]) -> Record | None:
        """Turn one parsed journal entry into a ``Record``."""
        get = entry.get
        raw_message = get("MESSAGE")
        if raw_message is None:
            if "MESSAGE" not in entry:
                self.skipped["no_message"] += 1
                return None
            message = ""  # over 4096 bytes without --all: journalctl printed null
            self.skipped["message_null"] += 1
        else:
            decoded = decode_field(raw_message)
            if decoded is None:
                self.skipped["invalid_field"] += 1
                return None
            message = decoded if len(decoded) <= _MAX_MESSAGE else decoded[:_MAX_MESSAGE]
        cursor = _text(get("__CURSOR"))
        if cursor is not None:
            self.last_cursor = cursor
        realtime = self._realtime(get("__REALTIME_TIMESTAMP"))
        identifier = _text(get("SYSLOG_IDENTIFIER"))
        pid = self._int(get("_PID"))
        manager_unit = _text(get("UNIT")) or _text(get("USER_UNIT"))
        from_manager = manager_unit is not None and (
            pid == 1 or identifier == "systemd" or _text(get("_COMM")) == "systemd"
        )
        if from_manager:
            unit = manager_unit
            invocation = _text(get("INVOCATION_ID")) or _text(get("USER_INVOCATION_ID"))
        else:
            unit = _text(get("_SYSTEMD_UNIT")) or _text(get("_SYSTEMD_USER_UNIT"))
            invocation = _text(get("_SYSTEMD_INVOCATION_ID")) or _text(get("INVOCATION_ID"))
        if get("_TRANSPORT") == "kernel":
            identifier = "kernel"
        return Record(
            message,
            realtime,
            self.host,
            unit,
            invocation,
            pid,
            identifier,
            self._int(get("PRIORITY")),
            cursor,
            _text(get("MESSAGE_ID")),
            from_manager,
        )

    def _realtime(self, value: object) -> datetime | None:
        text = _text(value)
        if text is None:
            return None
        try:
            micros = int(text)
            return _EPOCH + timedelta(microseconds=micros)
        except (ValueError, OverflowError):
            self.skipped["invalid_field"] += 1
            return None

    def _int(self, value: object) -> int | None:
        if value is None:
            return None
        text = _text(value)
        if text is None or not text.isdigit() or len(text) > 12:
            self.skipped["invalid_field"] += 1
            return None
        return int(text)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return decode_field(value)
