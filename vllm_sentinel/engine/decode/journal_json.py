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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import orjson

from vllm_sentinel.engine.decode.line_buffer import LineBuffer
from vllm_sentinel.engine.decode.record import Record

__all__ = [
    "JOURNAL_DROPPED_MESSAGE_ID",
    "JOURNAL_FIELDS",
    "SKIP_REASONS",
    "JournalJsonDecoder",
    "decode_field",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MESSAGE: Final = 1 << 20
# µs since the epoch that always make a time (17 digits: up to the year 5138); longer ones go
# through ``_realtime``, which counts the ones past year 9999
_MAX_REALTIME_DIGITS: Final = 17
_new_record: Final = tuple.__new__  # Record without the keyword-default wrapper (hot path)

JOURNAL_FIELDS: tuple[str, ...] = (
    "MESSAGE",
    "MESSAGE_ID",
    "PRIORITY",
    "SYSLOG_IDENTIFIER",
    "_PID",
    "_UID",
    "_COMM",
    "_TRANSPORT",
    "_SYSTEMD_UNIT",
    "_SYSTEMD_USER_UNIT",
    "_SYSTEMD_INVOCATION_ID",
    "UNIT",
    "USER_UNIT",
    "INVOCATION_ID",
    "USER_INVOCATION_ID",
    "_STREAM_ID",
    "N_DROPPED",
    "OBJECT_SYSTEMD_UNIT",
    "OBJECT_SYSTEMD_USER_UNIT",
    "_HOSTNAME",
)
"""Every field ``decode_entry`` reads: what ``journalctl --output-fields`` needs to send.

``__CURSOR`` and ``__REALTIME_TIMESTAMP`` are always sent. A stdout line of a real service
carries ~25 fields (``_CMDLINE``, ``_EXE``, ``_CAP_EFFECTIVE``…); the rest are never read, and
cutting them roughly halves the bytes to move and the JSON to parse.
"""


JOURNAL_DROPPED_MESSAGE_ID: Final = "a596d6fe7bfa4994828e72309e95d61e"
"""systemd's catalog id ``SD_MESSAGE_JOURNAL_DROPPED``: journald's ``Suppressed N messages from
UNIT`` (its per-unit rate limit, ``RateLimitBurst=``/``LogRateLimitBurst=``), written by journald
itself (``_TRANSPORT=driver``) with ``N_DROPPED=N`` and the unit in ``OBJECT_SYSTEMD_UNIT=``."""

SKIP_REASONS: tuple[str, ...] = (
    "invalid_field",
    "invalid_json",
    "line_too_long",
    "message_null",
    "no_message",
    "not_an_object",
)
"""Every reason the decoder counts in ``skipped`` (a fixed set: exported at 0 from the start)."""


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
        try:  # bytes() accepts exactly lists of ints 0–255 (bools included, as before)
            data = bytes(value)
        except (TypeError, ValueError):
            pass
        else:
            return data.decode("utf-8", errors="replace")
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
        host: the host name put on every record; ``None`` (replay) puts each entry's machine
            there (``_HOSTNAME``, ``None`` when absent), so that a journal holding several
            machines (a ``systemd-journal-remote`` directory) shows each unit per machine.
        max_line_bytes: a JSON line longer than this is dropped (``line_too_long``).
    """

    def __init__(self, host: str | None = None, *, max_line_bytes: int = 4 << 20) -> None:
        self.host = host
        self._lines = LineBuffer(max_line_bytes, keep_truncated=False)
        self._overflows_counted = 0
        self.skipped: Counter[str] = Counter()
        self.last_cursor: str | None = None
        self.lines_total = 0

    @property
    def max_line_bytes(self) -> int:
        """The longest line kept."""
        return self._lines.max_line_bytes

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial line held until its newline (at most ``max_line_bytes``)."""
        return self._lines.pending_bytes

    def feed(self, chunk: bytes) -> list[Record]:
        """Decode every complete line in ``chunk``."""
        records: list[Record] = []
        completed, block = self._lines.push(chunk)
        if completed is not None:
            record = self.decode_line(completed)
            if record is not None:
                records.append(record)
        if block is not None:
            too_long = self._lines.is_too_long
            limit = self._lines.max_line_bytes
            decode_line = self.decode_line
            append = records.append
            for piece in block.split(b"\n"):
                if len(piece) > limit and too_long(piece):
                    continue
                record = decode_line(piece)
                if record is not None:
                    append(record)
        self._count_overflows()
        return records

    def flush(self) -> list[Record]:
        """Decode a last line without newline (end of input)."""
        piece = self._lines.flush()
        self._count_overflows()
        record = self.decode_line(piece) if piece is not None else None
        return [record] if record is not None else []

    def _count_overflows(self) -> None:
        overflows = self._lines.overflows
        if overflows != self._overflows_counted:
            self.skipped["line_too_long"] += overflows - self._overflows_counted
            self._overflows_counted = overflows

    def decode_line(self, line: bytes) -> Record | None:
        """Decode one JSON line; ``None`` (and a count in ``skipped``) if it is no record."""
        if line[:1] != b"{" and not line.strip():
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
        # Fields are plain strings or absent in nearly every entry: those are read inline;
        # any other shape goes through _text/_int/_realtime, which decode and count it.
        get = entry.get
        raw_message = get("MESSAGE")
        if raw_message is None:
            if "MESSAGE" not in entry:
                self.skipped["no_message"] += 1
                return None
            message = ""  # over 4096 bytes without --all: journalctl printed null
            self.skipped["message_null"] += 1
        else:
            decoded = raw_message if isinstance(raw_message, str) else decode_field(raw_message)
            if decoded is None:
                self.skipped["invalid_field"] += 1
                return None
            message = decoded if len(decoded) <= _MAX_MESSAGE else decoded[:_MAX_MESSAGE]
        raw = get("__CURSOR")
        cursor = raw if raw is None or isinstance(raw, str) else self._text(raw)
        if cursor is not None:
            self.last_cursor = cursor
        raw = get("__REALTIME_TIMESTAMP")
        if isinstance(raw, str) and raw.isdecimal() and len(raw) <= _MAX_REALTIME_DIGITS:
            realtime: datetime | None = _EPOCH + timedelta(microseconds=int(raw))
        else:
            realtime = self._realtime(raw)
        raw = get("SYSLOG_IDENTIFIER")
        identifier = raw if raw is None or isinstance(raw, str) else self._text(raw)
        raw = get("_PID")
        pid = (
            int(raw)
            if isinstance(raw, str) and raw.isdecimal() and len(raw) <= 12
            else self._int(raw)
        )
        # UNIT= names another unit, so only the service manager may use it: PID 1 for system
        # units (_PID is set by journald, unforgeable), a user's manager for USER_UNIT= (a
        # "systemd" process in that user's user@UID.service, running as UID: _COMM alone is
        # any process's to choose). Any process can write UNIT=, USER_UNIT= and
        # SYSLOG_IDENTIFIER=systemd itself (native protocol, `logger --journald`); trusting
        # that would let it invent units, their series and their crashes.
        raw = get("UNIT")
        system_unit = raw if raw is None or isinstance(raw, str) else self._text(raw)
        if system_unit is None:
            raw = get("USER_UNIT")
            manager_unit = raw if raw is None or isinstance(raw, str) else self._text(raw)
        else:
            manager_unit = system_unit
        from_manager = manager_unit is not None and (
            pid == 1 if system_unit is not None else self._is_user_manager(get)
        )
        if from_manager:
            unit = manager_unit
            invocation = self._str(get("INVOCATION_ID")) or self._str(get("USER_INVOCATION_ID"))
        else:
            raw = get("_SYSTEMD_UNIT")
            unit = (raw if raw is None or isinstance(raw, str) else self._text(raw)) or self._str(
                get("_SYSTEMD_USER_UNIT")
            )
            raw = get("_SYSTEMD_INVOCATION_ID")
            invocation = (
                raw if raw is None or isinstance(raw, str) else self._text(raw)
            ) or self._str(get("INVOCATION_ID"))
        dropped = None
        transport = get("_TRANSPORT")
        if transport == "kernel":
            identifier = "kernel"
        elif transport == "driver" and get("MESSAGE_ID") == JOURNAL_DROPPED_MESSAGE_ID:
            # journald's own word (only journald writes the driver transport) about the unit
            # whose messages it dropped: the record is that unit's, with the count
            about = self._str(get("OBJECT_SYSTEMD_UNIT")) or self._str(
                get("OBJECT_SYSTEMD_USER_UNIT")
            )
            count = self._int(get("N_DROPPED"))
            if about is not None and count is not None:
                unit, invocation, dropped = about, None, count
        raw = get("PRIORITY")
        priority = (
            int(raw)
            if isinstance(raw, str) and raw.isdecimal() and len(raw) <= 12
            else self._int(raw)
        )
        raw = get("_HOSTNAME")
        machine = raw if raw is None or isinstance(raw, str) else self._text(raw)
        raw = get("MESSAGE_ID")
        message_id = raw if raw is None or isinstance(raw, str) else self._text(raw)
        raw = get("_STREAM_ID")
        stream = raw if raw is None or isinstance(raw, str) else self._text(raw)
        return _new_record(
            Record,
            (
                message,
                realtime,
                self.host if self.host is not None else machine,
                unit,
                invocation,
                pid,
                identifier,
                priority,
                cursor,
                message_id,
                from_manager,
                stream,
                dropped,
                machine,
            ),
        )

    def _is_user_manager(self, get: Callable[[str], object]) -> bool:
        """Whether an entry comes from a user's service manager: ``_COMM=systemd`` in
        ``_SYSTEMD_UNIT=user@UID.service`` with ``_UID=UID`` (journald's trusted fields)."""
        uid = self._str(get("_UID"))
        return (
            uid is not None
            and uid.isdecimal()
            and self._str(get("_COMM")) == "systemd"
            and self._str(get("_SYSTEMD_UNIT")) == f"user@{uid}.service"
        )

    def _str(self, value: object) -> str | None:
        """``_text`` for the usual shapes without a call's cost where it can."""
        if value is None or isinstance(value, str):
            return value
        return self._text(value)

    def _realtime(self, value: object) -> datetime | None:
        text = self._text(value)
        if text is None:
            return None
        try:
            micros = int(text)
            return _EPOCH + timedelta(microseconds=micros)
        except (ValueError, OverflowError):
            self.skipped["invalid_field"] += 1
            return None

    def _text(self, value: object) -> str | None:
        """A field as text; a value of no usable shape is ignored and counted."""
        if value is None or isinstance(value, str):
            return value
        text = decode_field(value)
        if text is None:
            self.skipped["invalid_field"] += 1
        return text

    def _int(self, value: object) -> int | None:
        if value is None:
            return None
        text = _text(value)
        # isdecimal, not isdigit: "²" is a digit that int() refuses (the decoder never raises)
        if text is None or not text.isdecimal() or len(text) > 12:
            self.skipped["invalid_field"] += 1
            return None
        return int(text)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return decode_field(value)
