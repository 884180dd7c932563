"""``TextLogDecoder``: plain-text logs as people paste them → records (core: pure, no I/O).

Accepts bytes in any chunking (``feed``/``flush``) and strips the outer wrapper a tool put
around each line, found by a table (``WRAPPERS``): journald's short formats
(``Mon DD HH:MM:SS host ident[pid]: `` — month names in any language — and ``short-iso``),
``kubectl logs --timestamps`` / ``docker logs -t`` RFC 3339 stamps, docker-compose
``name  | `` (followed by an RFC 3339 stamp with ``docker compose logs -t``), a Docker UI
``YYYY-MM-DD HH:MM:SS.mmm | ``, TorchServe's ``MODEL_LOG - `` and an application launcher's
``YYYY-MM-DD HH:MM:SS.mmm [Level] (Source) ``.
ANSI colour is removed first; tqdm ``\\r`` refreshes are collapsed later by ``vllm_line``.

Never raises on input: invalid UTF-8 is replaced (counted in ``repaired``), a line longer than
``max_line_bytes`` is cut (counted in ``skipped['line_truncated']``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Final

from vllm_sentinel.engine.decode.line_buffer import LineBuffer
from vllm_sentinel.engine.decode.paste import PasteReader, PasteTraits
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.decode.vllm_line import strip_ansi

__all__ = ["WRAPPERS", "TextLogDecoder", "Wrapper", "latest_year_not_after"]

_MONTH_NAMES: Final = (
    "jan janv jän ene gen янв",
    "feb févr fév fevr fev feb. фев",
    "mar mars mär märz мар",
    "apr avr abr апр",
    "may mai mag mayo май",
    "jun juin giu июн",
    "jul juil lug июл",
    "aug août aout ago авг",
    "sep sept set сен",
    "oct okt ott out окт",
    "nov ноя",
    "dec déc dez dic дек",
)
_MONTHS: Final[Mapping[str, int]] = MappingProxyType(
    {name: number for number, names in enumerate(_MONTH_NAMES, 1) for name in names.split()}
)


@dataclass(frozen=True, slots=True)
class Wrapper:
    """One outer line format: its name, regex (anchored) and how it gives a time."""

    name: str
    regex: re.Pattern[str]
    first: str  # what the first character class looks like: "digit" or "alpha"


WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper(
        "journald-short-iso",
        re.compile(
            r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)) "
            r"(?P<host>[\w.-]+) (?P<ident>[^\s\[\]:]{1,64})(?:\[(?P<pid>\d{1,10})\])?: ?"
        ),
        "digit",
    ),
    Wrapper(
        "torchserve",
        re.compile(
            r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,]\d+)? \[\w+\s*\] \S+ MODEL_LOG - ?"
        ),
        "digit",
    ),
    Wrapper(
        # an application launcher's own log line around the child's output: Lemonade server
        # (lemonade-sdk) `2026-05-08 11:47:02.257 [Error] (Process) …`, and the same shape of
        # other launchers (a stamp, a bracketed level word, an optional parenthesised source)
        "launcher",
        re.compile(
            r"(?P<iso>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?) "
            r"\[(?i:trace|debug|info|information|warn|warning|error|critical|fatal)\] "
            r"(?:\([\w .-]{1,40}\) )?"
        ),
        "digit",
    ),
    Wrapper(
        "rfc3339",
        re.compile(r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?"),
        "digit",
    ),
    Wrapper(
        "docker-ui", re.compile(r"(?P<iso>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \| ?"), "digit"
    ),
    Wrapper(
        "journald-short",
        re.compile(
            r"(?P<month>[^\W\d_]{3,5}\.?) {1,2}(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d)"
            r"(?:\.\d+)? "
            r"(?P<host>[\w.-]+) (?P<ident>[^\s\[\]:]{1,64})(?:\[(?P<pid>\d{1,10})\])?: ?"
        ),
        "alpha",
    ),
    Wrapper("docker-compose", re.compile(r"(?P<service>[\w][\w.-]{0,63}) {0,40}\| ?"), "alpha"),
)


def _wrapper_table(first: str) -> tuple[tuple[Wrapper, bool, bool, bool, bool], ...]:
    """The wrappers whose line starts with ``first``, in table order, with the groups each has."""
    return tuple(
        (
            wrapper,
            "iso" in wrapper.regex.groupindex,
            "month" in wrapper.regex.groupindex,
            "pid" in wrapper.regex.groupindex,
            "ident" in wrapper.regex.groupindex,
        )
        for wrapper in WRAPPERS
        if wrapper.first == first
    )


_DIGIT_WRAPPERS: Final = _wrapper_table("digit")
_RFC3339: Final = next(wrapper.regex for wrapper in WRAPPERS if wrapper.name == "rfc3339")
_ALPHA_WRAPPERS: Final = _wrapper_table("alpha")
# vLLM's own header ("INFO 01-02 …"): no alpha wrapper can match a line that starts so (the
# journald month must be followed by a day then a space, a compose name by spaces then "|").
_VLLM_HEADER_START: Final = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-")
# An unknown tool's prefix in front of vLLM's own line (a log shipper's
# `[2025-01-08 15:00:27] pod-7cf7 >> `, a collector's `2025-10-24T17:12:08.36 +08:00 CST `): a
# line that starts with a stamp and, further on, vLLM's process prefix, level header or
# uvicorn's padded level word (`INFO:     `). The prefix must hold a clock (HH:MM:SS) and end
# at a blank; another program's own line (`[2025-07-18 19:52:38,710] LMCache INFO: …`) is not
# vLLM's and keeps its prefix.
_FOREIGN_PREFIX: Final = re.compile(
    r"(?P<prefix>[^\s(][^(]{0,100}?\d\d:\d\d:\d\d[^(]{0,60}?)\s+(?="
    r"\(\w[\w.-]{0,40} pid=\d{1,10}\) |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
    r"\d\d:\d\d:\d\d |INFO: {5}|WARNING: {2}|ERROR: {4}|DEBUG: {4}|CRITICAL: )"
)
_LOOSE_ISO: Final = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<clock>\d\d:\d\d:\d\d(?:[.,]\d+)?)"
    r"(?: ?(?P<zone>Z|[+-]\d\d:?\d\d))?"
)
_MANAGER_IDENTS: Final = frozenset({"systemd", "kernel"})
_new_record: Final = tuple.__new__  # Record without the keyword-default wrapper (hot path)


def _loose_time(prefix: str) -> datetime | None:
    """The first date and time in an unknown tool's prefix, UTC (no zone: read as UTC)."""
    found = _LOOSE_ISO.search(prefix)
    if found is None:
        return None
    zone = found.group("zone") or ""
    return _parse_iso(f"{found.group('date')}T{found.group('clock')}{zone}")


def _parse_iso(text: str) -> datetime | None:
    text = text.replace(",", ".")
    if "." in text:  # Python takes at most 6 fractional digits
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        tail = tail[:digits][:6] + tail[digits:]
        text = f"{head}.{tail}"
    try:
        value = datetime.fromisoformat(text)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: year 9999 with a negative offset
        return None


_LEAP_CYCLE: Final = 8  # years back that always hold a 29 February (1900 and 2100 are common)


def latest_year_not_after(time: datetime, bound: datetime | None) -> datetime | None:
    """``time`` (a stamp given an assumed year) moved to the latest year that keeps it at or
    before ``bound``; as it is when it already is, or without a bound. ``None`` when no year
    within a leap cycle fits (29 February near year 1).
    """
    if bound is None or time <= bound:
        return time
    for year in range(bound.year, bound.year - _LEAP_CYCLE, -1):
        try:
            moved = time.replace(year=year)
        except ValueError:  # 29 February in a common year, or before year 1
            continue
        if moved <= bound:
            return moved
    return None


_ZONED = re.compile(r"(?:[Zz]|[+-]\d\d:?\d\d)$")
"""The end of an ISO 8601 stamp that names its zone."""


class TextLogDecoder:
    """Decode plain-text log bytes into ``Record``s.

    Args:
        unit: the unit every record is about (plain text names none).
        host: the host the text came from, if known.
        reference_year: year for timestamps without one (journald short), until corrected
            by a month rollover.
        not_after: no stamp without a year is put after this time (a wall time, as the
            stamps are read: ``latest_year_not_after``); ``None``: no bound.
        max_line_bytes: lines are cut to this length.
    """

    def __init__(
        self,
        unit: str = "vllm",
        host: str | None = None,
        *,
        reference_year: int = 1970,
        not_after: datetime | None = None,
        max_line_bytes: int = 1 << 20,
    ) -> None:
        self.unit = unit
        self.host = host
        self._year = reference_year
        self._not_after = not_after
        self._last_month = 0
        self._short_seen = False  # a journald short stamp: local time, no year
        self._zoned_seen = False  # an ISO stamp with its zone: a real time
        self._short_key: tuple[str, str, str] | None = None  # last journald-short time read
        self._short_value: datetime | None = None
        self._lines = LineBuffer(max_line_bytes, keep_truncated=True)
        self.repaired: Counter[str] = Counter()
        self._paste = PasteReader(self.wrapper_length, self.repaired, max_line_chars=max_line_bytes)
        self._overflows_counted = 0
        self.skipped: Counter[str] = Counter()
        self.lines_total = 0

    @property
    def max_line_bytes(self) -> int:
        """The longest line kept."""
        return self._lines.max_line_bytes

    @property
    def paste_traits(self) -> PasteTraits:
        """The paste artefacts the input showed (decided once its first window was read)."""
        return self._paste.traits

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial line held until its newline (at most ``max_line_bytes``)."""
        return self._lines.pending_bytes

    def feed(self, chunk: bytes) -> list[Record]:
        """Decode every complete line in ``chunk`` (with what was pending before).

        While the paste window is open (the first ``PasteReader`` window of the input) lines
        are held, not returned: ``flush`` returns whatever is still held.
        """
        records: list[Record] = []
        completed, block = self._lines.push(chunk)
        if completed is not None:
            self._emit([self._clean(self._text(completed))], records)
        if block is not None:
            self._decode_block(block, records)
        self._count_overflows()
        return records

    def _decode_block(self, block: bytes, records: list[Record]) -> None:
        """Decode whole lines (``block`` holds no final newline); append their records.

        Hot path: the block is decoded at once and split as text, which gives the same lines
        as decoding each line (a newline byte is never part of a UTF-8 sequence). Invalid UTF-8
        and over-long lines take the line-by-line path, which counts them.
        """
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        limit = self._lines.max_line_bytes
        if text is None or (len(block) > limit and any(len(p) > limit for p in block.split(b"\n"))):
            lines = [
                self._clean(self._text(raw[:limit] if self._lines.is_too_long(raw) else raw))
                for raw in block.split(b"\n")
            ]
            self._emit(lines, records)
            return
        lines = text.split("\n")
        self.lines_total += len(lines)
        if "\x00" in text or "\r" in text or "\x1b" in text:
            lines = [self._clean(line) for line in lines]
        if not self._paste.passthrough:
            self._emit(lines, records)
            return
        for line in lines:
            if line.startswith("-- ") and line.endswith(" --"):
                records.append(Record(line, host=self.host, unit=self.unit, from_manager=True))
            else:
                records.append(self._unwrap(line))

    def _emit(self, lines: list[str], records: list[Record]) -> None:
        """Records of cleaned physical lines, through the paste repairs while they run."""
        if not self._paste.passthrough:
            lines = self._paste.push(lines)
        for line in lines:
            if line.startswith("-- ") and line.endswith(" --"):
                records.append(Record(line, host=self.host, unit=self.unit, from_manager=True))
            else:
                records.append(self._unwrap(line))

    def flush(self) -> list[Record]:
        """Decode what is left after the last newline (end of input), and all that is held."""
        piece = self._lines.flush()
        self._count_overflows()
        records: list[Record] = []
        if piece is not None:
            self._emit([self._clean(self._text(piece))], records)
        for line in self._paste.flush():
            records.append(self._record(line))
        return records

    def _count_overflows(self) -> None:
        overflows = self._lines.overflows
        if overflows != self._overflows_counted:
            self.skipped["line_truncated"] += overflows - self._overflows_counted
            self._overflows_counted = overflows

    def _text(self, raw: bytes) -> str:
        """One physical line as text (invalid UTF-8 replaced and counted)."""
        self.lines_total += 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.repaired["invalid_utf8"] += 1
            return raw.decode("utf-8", errors="replace")

    def _clean(self, line: str) -> str:
        """NUL bytes replaced (counted), a final ``\\r`` and ANSI escapes removed."""
        if "\x00" in line:
            line = line.replace("\x00", "\ufffd")
            self.repaired["nul_byte"] += 1
        if line.endswith("\r"):
            line = line.rstrip("\r")
        if "\x1b" in line:
            line = strip_ansi(line)
        return line

    def _record(self, line: str) -> Record:
        if line.startswith("-- ") and line.endswith(" --"):
            return Record(line, host=self.host, unit=self.unit, from_manager=True)
        return self._unwrap(line)

    def wrapper_length(self, line: str) -> int:
        """The length of the outer wrapper ``line`` starts with (``WRAPPERS``), 0 when none.

        Pure (no year rollover is learnt from it): the paste repairs ask it about any text.
        """
        first = line[:1]
        if first.isdigit():
            wrappers = _DIGIT_WRAPPERS
        elif first.isalpha() and _VLLM_HEADER_START.match(line) is None:
            wrappers = _ALPHA_WRAPPERS
        else:
            return 0
        for wrapper, *_ in wrappers:
            found = wrapper.regex.match(line)
            if found is None:
                continue
            if wrapper.name != "docker-compose":
                return found.end()
            end = self._compose_end(line, found.end())
            if end >= 0:
                return end
        return 0

    def _plain(self, line: str) -> Record:
        """A line without wrapper (hot path: no keyword defaults, no unpacking)."""
        return _new_record(
            Record,
            (
                line,
                None,
                self.host,
                self.unit,
                None,
                None,
                None,
                None,
                None,
                None,
                False,
                None,
                None,
                None,
            ),
        )

    def _unwrap(self, line: str) -> Record:
        first = line[:1]
        if first.isdigit():
            wrappers = _DIGIT_WRAPPERS
        elif first.isalpha():
            if _VLLM_HEADER_START.match(line) is not None:  # no wrapper can match (see above)
                return self._plain(line)
            wrappers = _ALPHA_WRAPPERS
        elif first == "[":
            wrappers = ()  # only an unknown tool's prefix (``_FOREIGN_PREFIX``) may be there
        else:
            return self._plain(line)
        realtime: datetime | None = None
        pid: int | None = None
        ident: str | None = None
        for wrapper, has_iso, has_month, has_pid, has_ident in wrappers:
            found = wrapper.regex.match(line)
            if found is None:
                continue
            end = found.end()
            iso = found.group("iso") if has_iso else None
            if wrapper.name == "docker-compose":
                if not self._looks_like_compose(line, end):
                    continue
                if line[end : end + 1].isdigit():
                    # `docker compose logs -t`: the container's RFC 3339 stamp follows the name
                    stamped = _RFC3339.match(line, end)
                    if stamped is not None:
                        iso, end = stamped.group("iso"), stamped.end()
            if iso:
                realtime = _parse_iso(iso)
                if not self._zoned_seen:
                    self._zoned_seen = _ZONED.search(iso) is not None
            elif has_month:
                month, day, clock = found.group("month", "day", "clock")
                if month:
                    realtime = self._short_time(month, day, clock)
            if has_pid:
                pid_text = found.group("pid")
                if pid_text:
                    pid = int(pid_text)
            if has_ident:
                ident = found.group("ident")
            line = line[end:]
            break
        else:
            foreign = _FOREIGN_PREFIX.match(line)
            if foreign is not None:
                realtime = _loose_time(foreign.group("prefix"))
                line = line[foreign.end() :]
        manager = ident in _MANAGER_IDENTS
        return _new_record(
            Record,
            (
                line,
                realtime,
                self.host,
                self.unit,
                None,
                pid,
                ident,
                None,
                None,
                None,
                manager,
                None,
                None,
                None,
            ),
        )

    @classmethod
    def _compose_end(cls, line: str, end: int) -> int:
        """Where a docker-compose prefix ending at ``end`` really ends (after the RFC 3339 stamp
        of ``docker compose logs -t``), or -1 when it is no compose prefix (a tqdm bar)."""
        if not cls._looks_like_compose(line, end):
            return -1
        if line[end : end + 1].isdigit():
            stamped = _RFC3339.match(line, end)
            if stamped is not None:
                return stamped.end()
        return end

    @staticmethod
    def _looks_like_compose(line: str, end: int) -> bool:
        """A compose prefix is ``name`` then padding then ``|``; not a tqdm bar or a table."""
        bar = line.find("|")
        return 0 < bar < end and "%" not in line[:bar]

    def _short_time(self, month_name: str, day: str, clock: str) -> datetime | None:
        key = (month_name, day, clock)
        if key == self._short_key:
            return self._short_value  # same second, same month: no rollover, same result
        value = self._compute_short_time(month_name, day, clock)
        if value is not None:
            self._short_key, self._short_value = key, value
        return value

    @property
    def times_as_printed(self) -> bool:
        """True unless the text's times are real: ISO 8601 stamps with their zone (``docker
        logs -t``, Kubernetes) and no journald short stamp. Otherwise its times are the host's
        local time as printed (journald short, vLLM's own header), read as if UTC, the year
        assumed where the stamps carry none."""
        return self._short_seen or not self._zoned_seen

    def _compute_short_time(self, month_name: str, day: str, clock: str) -> datetime | None:
        month = _MONTHS.get(month_name.lower().rstrip("."))
        if month is None:
            return None
        self._short_seen = True
        if self._last_month and month < self._last_month - 6:
            self._year += 1
        self._last_month = month
        try:
            value = datetime(
                self._year,
                month,
                int(day),
                int(clock[0:2]),
                int(clock[3:5]),
                int(clock[6:8]),
                tzinfo=UTC,
            )
        except ValueError:
            return None
        return latest_year_not_after(value, self._not_after)
