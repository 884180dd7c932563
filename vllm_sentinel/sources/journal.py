"""``JournalFollower``: one host's journal → batches of records for the Monitor (edge: asyncio).

For each host the follower runs ``journalctl`` through a ``Transport`` (a local child, or an
SSH channel on the host's shared connection):

1. **Window.** ``journalctl -u U… MESSAGE_ID=<Started> --since=@<now-max_age>`` lists the units'
   recent starts; the backfill begins at the ``backfill_max_invocations``-th latest start of
   every unit (at most ``backfill_max_age_seconds`` back), so phase, incarnation and the last
   crash are right at the first scrape. A stored cursor older than that window wins, so nothing
   written while the daemon was down is skipped.
2. **Backfill.** ``journalctl -o json -a -u U… --since=@T`` (or ``--cursor=C``) read to
   its end. Without ``-f`` journalctl shows every boot, so a reboot in the window is seen.
   A unit with no record in the window (an idle server started days ago) is then read from
   its latest ``Started`` up to the window, so that it is not absent after a restart. Records
   up to the stored cursor (or, without one, up to the daemon's start) are marked
   ``history``: they rebuild the state without counting starts and crashes again.
3. **Follow.** ``journalctl -o json -a -f --cursor=<last>``, without unit matches: systemd
   252's follow with match terms skips entries appended while it reads (``_follow``); the
   units are kept by the Monitor's ``TrackerSet``. systemd ≥ 250 limits ``--follow``
   to the newest boot in what it reads: right for a machine's own journal, wrong for files
   named with ``--directory``/``--file`` (a journal-remote directory holds several machines,
   each with its own boots), where ``--merge`` is added to lift it.

Every chunk is decoded (``JournalJsonDecoder``: bytes, never strict UTF-8) and handed over as a
``JournalBatch`` with the last cursor; the Monitor applies it and marks the cursor. When the
stream ends or the transport fails the follower reconnects with capped exponential backoff and
jitter (tenacity) and resumes from the last cursor it read, so nothing is lost or doubled (the
tracker also drops records whose cursor it already applied). It logs once per state change.

**Resuming: ``--cursor``, not ``--after-cursor``.** journalctl (systemd 252) answers
``--after-cursor=C`` by seeking to C's position and skipping one entry *whether or not C is
still there*: when the file holding C was rotated away and vacuumed, the first entry after C is
lost. The follower therefore resumes with ``--cursor=C`` and drops the first entry only when it
*is* C. When C is gone, journalctl starts at C's position (sequence number, else monotonic,
else wall time) and the first entry is kept; the follower says so once
(``journal_cursor_unknown``, ``action=resume_at_position``).

**A stored cursor** (from the cursor store, i.e. a previous run) is first looked up with
``journalctl --cursor=C --lines=1`` and no unit filter. If the journal does not hold it (garbage,
rotated away, written on another machine) the follower logs ``journal_cursor_unknown``
(``action=window_backfill``) and backfills the window instead of trusting its position.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

import orjson
import structlog
from tenacity import BaseRetrying, RetryCallState

from vllm_sentinel.engine.decode.journal_json import JOURNAL_FIELDS, JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.decode.unit_name import is_unit_name
from vllm_sentinel.engine.snapshot import CollectorState
from vllm_sentinel.engine.unit_selection import selects
from vllm_sentinel.errors import TransportError
from vllm_sentinel.sources.gpu import BackoffWait
from vllm_sentinel.sources.transport import Transport

__all__ = [
    "MAX_UNIT_FILTERS",
    "NO_JOURNAL_FILES",
    "STARTED_MESSAGE_ID",
    "FollowerSettings",
    "HistoryBoundary",
    "JournalBatch",
    "JournalFollower",
    "build_journalctl_argv",
    "cursor_time",
    "unit_filter",
]

NO_JOURNAL_FILES = "no_journal_files"
"""The journal collector's reason when journalctl finds no entry at all (``-- No entries --``,
``No journal files were found.``): nothing to follow, whatever the unit names."""

_NO_JOURNAL_FILES_DETAIL = (
    "journalctl finds no journal entries: no journal files where it looks (journald's "
    "Storage= volatile or none, a wrong --directory), or this user may not read them (the "
    "systemd-journal group)"
)

STARTED_MESSAGE_ID = "39f53479d3a045ac8e11786248231fbf"
"""systemd's catalog id of "Started <unit>" (src/core/job.c, ``SD_MESSAGE_UNIT_STARTED``)."""

_CURSOR_TIME = re.compile(r"(?:^|;)t=([0-9a-f]{1,16})(?:;|$)")
_CURSOR_SEQNUM = re.compile(r"(?:^|;)s=([0-9a-f]{1,32});i=([0-9a-f]{1,16})(?:;|$)")
_log = structlog.get_logger("vllm_sentinel.sources.journal")


@dataclass(frozen=True, slots=True)
class JournalBatch:
    """Records read from one host, and the position they take the host to.

    ``cursor`` is the journal cursor of the last record, the position to save with the
    counters once the batch is applied; ``None`` leaves the position where it is (records with
    no cursor, history, the backfill's end). ``backfill`` is True for records of the startup
    backfill; an empty batch with ``backfill=False`` marks its end. ``history`` is True for
    records written up to what an earlier run reported (its stored cursor) or, without a
    cursor, up to the daemon's start: they rebuild the state but their starts and crashes are
    not counted again, and they never move the position (it is at the boundary already).
    """

    host: str
    records: tuple[Record, ...]
    cursor: str | None
    backfill: bool = False
    history: bool = False


@dataclass(frozen=True, slots=True)
class FollowerSettings:
    """Backfill bounds and reconnect timing for one host."""

    units: tuple[str, ...]
    journalctl_args: tuple[str, ...] = ()
    backfill_max_invocations: int = 3
    backfill_max_age_seconds: float = 86400.0
    backfill_max_records: int = 200_000
    reconnect_initial_seconds: float = 1.0
    reconnect_max_seconds: float = 60.0
    query_timeout_seconds: float = 30.0
    unit_discovery_interval_seconds: float = 30.0
    max_units: int = 1024
    forget_unit_after_seconds: float = 0.0  # a quiet unit started longer ago is not read (0: all)


_FILE_OPTIONS = ("--directory", "-D", "--file", "--root", "--image")


def build_journalctl_argv(
    units: Sequence[str],
    extra_args: Sequence[str] = (),
    *,
    follow: bool = False,
    since: float | None = None,
    until: float | None = None,
    after_cursor: str | None = None,
    lines: int | str | None = None,
    matches: Sequence[str] = (),
    output_fields: Sequence[str] | None = None,
    cursor: str | None = None,
    field: str | None = None,
) -> list[str]:
    """Build a ``journalctl`` argv (a list: never a shell string).

    Args:
        units: unit names or globs, one ``--unit`` each (validated by the config).
        extra_args: configured options such as ``--directory=/var/log/journal/remote``.
        follow: add ``--follow``.
        since: Unix seconds for ``--since=@…``.
        until: Unix seconds for ``--until=@…`` (entries before it).
        after_cursor: resume after this cursor.
        cursor: start at this cursor (its entry included; wins over ``after_cursor``).
        lines: ``--lines`` limit (a number or ``"all"``).
        matches: ``FIELD=value`` journal matches.
        field: list the values of this field instead of entries (``--field``).
        output_fields: restrict the JSON fields journalctl sends (default: the fields the
            decoder reads, ``journal_json.JOURNAL_FIELDS``; ``()`` for every field).
    """
    argv = ["journalctl", "--output=json", "--all", "--no-pager", "--quiet"]
    argv.extend(extra_args)
    argv.extend(f"--unit={unit}" for unit in units)
    if follow:
        argv.append("--follow")
        if any(arg.startswith(_FILE_OPTIONS) for arg in extra_args):
            # systemd ≥ 250: --follow implies --boot (the newest boot in what is read) unless
            # --merge; journal files of other machines (a journal-remote directory) or of an
            # earlier boot would be skipped. --merge adds nothing when files are named.
            argv.append("--merge")
    if cursor is not None:
        argv.append(f"--cursor={cursor}")
    elif after_cursor is not None:
        argv.append(f"--after-cursor={after_cursor}")
    elif since is not None:
        argv.append(f"--since=@{since:.6f}")
    if until is not None:
        argv.append(f"--until=@{until:.6f}")
    if lines is not None:
        argv.append(f"--lines={lines}")
    if field is not None:
        argv.append(f"--field={field}")
        return argv
    fields = JOURNAL_FIELDS if output_fields is None else output_fields
    if fields:
        argv.append("--output-fields=" + ",".join(fields))
    argv.extend(matches)
    return argv


MAX_UNIT_FILTERS = 32
"""Above this many units a backfill reads its window without unit matches and the Monitor's
``TrackerSet`` keeps the units' records (docs/reliability.md, "Many units"): journalctl (252)
turns each ``--unit=`` into four match terms and slows down with their number (1,000 units:
105 s with ``--unit`` each, 23 s with one match per unit and field, 2.0 s unfiltered for a
window of 43,000 entries); up to 100 units the filters cost under 0.4 s."""


def unit_filter(units: tuple[str, ...]) -> tuple[str, ...]:
    """The ``--unit`` names a backfill passes: ``units``, or none above ``MAX_UNIT_FILTERS``."""
    return units if len(units) <= MAX_UNIT_FILTERS else ()


def cursor_time(cursor: str) -> datetime | None:
    """The realtime (UTC, to the µs) inside a journal cursor, if it has the usual ``t=`` part.

    systemd documents cursors as opaque; this is used only to compare a stored cursor with
    the backfill window (an unreadable cursor is then "older than the window") and to tell
    history from new records.
    """
    found = _CURSOR_TIME.search(cursor)
    if found is None:
        return None
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(found.group(1), 16))
    except OverflowError:  # t= beyond year 9999: not a real cursor
        return None


def _seqnum(cursor: str) -> tuple[str, int] | None:
    """The sequence-number id and number inside a journal cursor (``s=…;i=…``), if any."""
    found = _CURSOR_SEQNUM.search(cursor)
    return (found.group(1), int(found.group(2), 16)) if found is not None else None


@dataclass(frozen=True, slots=True)
class HistoryBoundary:
    """Which records an earlier run of the daemon counted already: *history*.

    With a ``cursor`` (saved by the last run with its counters), exactly the records at or
    before it in the journal: a record of the same sequence-number source (the ``s=`` of its
    cursor; journald keeps one per machine across files) is compared by sequence number, so
    late lines whose timestamps are earlier than what came before are placed right; a record
    of another source (another machine's files in a journal-remote directory) by time. Without
    a cursor (a host's first start), the records written up to ``since``.
    """

    cursor: str | None = None
    since: datetime | None = None

    @property
    def _position(self) -> tuple[tuple[str, int] | None, datetime | None]:
        if self.cursor is None:
            return None, self.since
        return _seqnum(self.cursor), cursor_time(self.cursor) or self.since

    def split(self, records: Sequence[Record]) -> int:
        """How many leading ``records`` (in journal order) are history."""
        seqnum, until = self._position
        for index, record in enumerate(records):
            if seqnum is not None and record.cursor is not None:
                own = _seqnum(record.cursor)
                if own is not None and own[0] == seqnum[0]:
                    if own[1] > seqnum[1]:
                        return index
                    continue
            if until is None or record.realtime is None or record.realtime > until:
                return index
        return len(records)


Emit = Callable[[JournalBatch], Awaitable[None]]


class JournalFollower:
    """Backfill then follow one host's journal, reconnecting forever; cancel to stop.

    Args:
        host: the host name (labels, logs).
        transport: runs ``journalctl`` there.
        settings: units, extra arguments, bounds, backoff.
        cursor: the cursor to resume from: the last applied (this run, after a reload) or the
            stored one.
        history: which records an earlier run counted already (default: up to ``cursor``, or,
            without one, up to now).
        read_from: the backfill reads the journal from this time at least (the start of the
            oldest incarnation whose outcome could still change when the last run saved, a
            crash it had not counted yet included, so that they are read again whole), at most
            ``backfill_max_age_seconds`` back.
        clock: returns the current time (UTC); injectable for tests.
        sleep: waits between reconnects; injectable for tests.
    """

    def __init__(
        self,
        host: str,
        transport: Transport,
        settings: FollowerSettings,
        *,
        cursor: str | None = None,
        history: HistoryBoundary | None = None,
        read_from: datetime | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.host = host
        self._transport = transport
        self._settings = settings
        self._cursor = cursor
        # The backfill's records up to here were counted by an earlier run: not counted again
        if history is None:
            history = HistoryBoundary(cursor, clock())
        self._history = history
        self._history_open = True  # the records read may still be history
        self._read_from = read_from
        self._backfilled_units: set[str | None] = set()  # units the backfill met
        self._clock = clock
        self._sleep = sleep
        self._wait = BackoffWait(settings.reconnect_initial_seconds, settings.reconnect_max_seconds)
        self._state = CollectorState(up=False, since=None, reason="starting")
        self._skipped: dict[str, int] = {}
        self._follow_since: float | None = None
        self._cursor_is_ours = False  # read in this run (not loaded from the store)
        self._saved_position_unknown = False  # the stored cursor is not in this journal
        self._backfilled_records = 0
        self._globs = any(char in unit for unit in settings.units for char in "*?[")
        self._units: tuple[str, ...] = () if self._globs else settings.units
        self._new_units: tuple[str, ...] = ()  # appeared after the backfill: backfill them too
        self._told_no_units = False
        self._told_too_many_units = False
        self.records_total = 0

    @property
    def state(self) -> CollectorState:
        """The journal collector's health."""
        return self._state

    @property
    def cursor(self) -> str | None:
        """The cursor of the last record read."""
        return self._cursor

    @property
    def skipped(self) -> dict[str, int]:
        """Records that could not be read, by reason (counter values)."""
        return dict(self._skipped)

    @property
    def history(self) -> HistoryBoundary:
        """Which records an earlier run counted (a follower re-created by a reload is given the
        same)."""
        return self._history

    def _set_state(self, up: bool, reason: str, detail: str = "") -> None:
        previous = self._state
        if previous.up == up and previous.reason == reason:
            return
        reconnects = previous.reconnects_total + (1 if up and previous.since is not None else 0)
        self._state = CollectorState(up, self._clock(), reason, reconnects)
        if up:
            _log.info("journal_collector_up", host=self.host, cursor_known=self._cursor is not None)
        else:
            _log.warning("journal_collector_down", host=self.host, reason=reason, detail=detail)

    @property
    def units(self) -> tuple[str, ...]:
        """The unit names followed now (globs resolved against the journal)."""
        return self._units

    async def run(self, emit: Emit) -> None:
        """Backfill, then follow, until cancelled."""
        attempt = 0
        backfilled = False
        while True:
            try:
                if self._globs and not self._units:
                    self._units = await self._resolve_units()
                if not self._units:
                    await self._wait_for_units()
                    continue
                if not backfilled:
                    await self._backfill(emit)
                    backfilled = True
                elif self._new_units:
                    new_units, self._new_units = self._new_units, ()
                    await self._backfill_new_units(emit, new_units)
                changed = await self._follow_until_units_change(emit)
                if changed:
                    continue
                reason, detail = "stream_ended", "journalctl exited"
            except TransportError as error:
                reason, detail = error.reason, error.detail
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a bug must not take down the other hosts
                _log.exception("journal_follower_failed", host=self.host)
                reason, detail = "internal_error", f"{type(error).__name__}: {error}"
            if self._state.up:
                attempt = 0
            self._set_state(False, reason, detail)
            attempt += 1
            delay = self._wait_seconds(attempt)
            await self._sleep(delay)

    async def _resolve_units(self) -> tuple[str, ...]:
        """Unit names in the journal that match the configured names or globs.

        journalctl expands ``--unit`` globs once, when it starts, and fails ("No data
        available") when a glob matches nothing yet; so globs are resolved here and
        re-resolved every ``unit_discovery_interval_seconds``, from what only journald and
        systemd can write (systemd.journal-fields(7)): the values of ``_SYSTEMD_UNIT`` (a
        trusted field, set by journald from the writer's cgroup) and the ``UNIT=`` of PID 1's
        own entries (systemd's messages about a unit) within the backfill window. Any process
        can write ``UNIT=`` itself (``logger --journald``): those values are never read. Each
        name must be an exact systemd unit name (``unit_name.is_unit_name``: no glob, no
        template) before it becomes an argument.
        """
        settings = self._settings
        argv = build_journalctl_argv((), settings.journalctl_args, field="_SYSTEMD_UNIT")
        output = await self._transport.run(argv, settings.query_timeout_seconds)
        names = {line.decode("utf-8", errors="replace").strip() for line in output.splitlines()}
        since = self._clock().timestamp() - settings.backfill_max_age_seconds
        argv = build_journalctl_argv(
            (),
            settings.journalctl_args,
            since=since,
            matches=("_PID=1", "_UID=0"),
            output_fields=("UNIT",),
        )
        output = await self._transport.run(argv, settings.query_timeout_seconds)
        for line in output.splitlines():
            try:
                unit = orjson.loads(line).get("UNIT")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(unit, str):
                names.add(unit)
        matching = sorted(
            name
            for name in names
            if is_unit_name(name) and selects(settings.units, name)  # never the sentinel's own
        )
        if len(matching) > settings.max_units:
            if not self._told_too_many_units:
                self._told_too_many_units = True
                _log.warning(
                    "journal_units_capped",
                    host=self.host,
                    matching=len(matching),
                    followed=settings.max_units,
                    detail="more units match the globs than max_units: the first by name are "
                    "followed",
                )
            matching = matching[: settings.max_units]
        return tuple(matching)

    async def _wait_for_units(self) -> None:
        """No unit matches yet: up when the journal holds entries (look again later); down
        with ``no_journal_files`` when journalctl finds none at all (no journal files where it
        looks, or only empty ones), which no unit name can fix."""
        if not await self._has_entries():
            self._set_state(False, NO_JOURNAL_FILES, _NO_JOURNAL_FILES_DETAIL)
            self._told_no_units = False
        elif not self._state.up or not self._told_no_units:
            self._set_state(True, "")
            self._told_no_units = True
            _log.info("journal_no_matching_units", host=self.host, units=list(self._settings.units))
        await self._sleep(self._settings.unit_discovery_interval_seconds)
        self._units = await self._resolve_units()

    async def _has_entries(self) -> bool:
        """Whether journalctl (with the host's options) finds any entry at all."""
        settings = self._settings
        argv = build_journalctl_argv(
            (), settings.journalctl_args, lines=1, output_fields=("__REALTIME_TIMESTAMP",)
        )
        output = await self._transport.run(argv, settings.query_timeout_seconds)
        return bool(output.strip())

    async def _follow_until_units_change(self, emit: Emit) -> bool:
        """Follow; return True when the matching units changed (follow again with them)."""
        if not self._globs:
            await self._follow(emit)
            return False
        follow = asyncio.ensure_future(self._follow(emit))
        watch = asyncio.ensure_future(self._watch_units())
        try:
            done, _ = await asyncio.wait({follow, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (follow, watch):
                if not task.done():
                    task.cancel()
            await asyncio.gather(follow, watch, return_exceptions=True)
        if follow in done:
            follow.result()  # raises the follower's TransportError, if any
            return False
        units = watch.result()
        added = tuple(unit for unit in units if unit not in self._units)
        _log.info("journal_units_changed", host=self.host, units=list(units), added=list(added))
        self._new_units = added
        self._units = units
        return True

    async def _backfill_new_units(self, emit: Emit, units: tuple[str, ...]) -> None:
        """Backfill units that appeared while following; a unit-filtered query journalctl
        refuses costs that backfill only (they are followed anyway), never the host's follow."""
        try:
            await self._backfill(emit, units=units)
        except TransportError as error:
            if error.reason != "command_failed":
                self._new_units = units  # the transport failed: try again after reconnecting
                raise
            _log.warning(
                "journal_unit_backfill_failed",
                host=self.host,
                units=list(units)[:20],
                detail=error.detail[:300],
            )

    async def _watch_units(self) -> tuple[str, ...]:
        while True:
            await self._sleep(self._settings.unit_discovery_interval_seconds)
            units = await self._resolve_units()
            if units != self._units:
                return units

    def _wait_seconds(self, attempt: int) -> float:
        state = RetryCallState(cast(BaseRetrying, None), None, (), {})
        state.attempt_number = attempt
        return float(self._wait(state))

    async def _window_start(self, units: tuple[str, ...]) -> float:
        settings = self._settings
        now = self._clock().timestamp()
        start = now - settings.backfill_max_age_seconds
        filtered = unit_filter(units)
        argv = build_journalctl_argv(
            filtered,
            settings.journalctl_args,
            since=start,
            matches=(f"MESSAGE_ID={STARTED_MESSAGE_ID}", *(() if filtered else ("_PID=1",))),
            output_fields=("UNIT", "USER_UNIT"),
        )
        output = await self._transport.run(argv, settings.query_timeout_seconds)
        wanted = set(units)
        starts: dict[str, list[float]] = {}
        for line in output.splitlines():
            try:
                entry = orjson.loads(line)
                unit = entry.get("UNIT") or entry.get("USER_UNIT")
                when = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                continue
            if isinstance(unit, str) and unit in wanted:
                starts.setdefault(unit, []).append(when)
        keep = settings.backfill_max_invocations
        if not starts or any(len(times) < keep for times in starts.values()):
            return start
        return max(start, min(sorted(times)[-keep] for times in starts.values()))

    async def _is_cursor_known(self, cursor: str) -> bool:
        """Whether the journal holds the entry of ``cursor`` (looked up without unit filter)."""
        settings = self._settings
        argv = build_journalctl_argv((), settings.journalctl_args, cursor=cursor, lines=1)
        try:
            output = await self._transport.run(argv, settings.query_timeout_seconds)
        except TransportError as error:
            if error.reason == "command_failed" and "cursor" in error.detail.lower():
                return False  # "Failed to seek to cursor: Invalid argument"
            raise
        first = output.split(b"\n", 1)[0]
        try:
            entry = orjson.loads(first)
        except orjson.JSONDecodeError:
            return False
        return isinstance(entry, dict) and entry.get("__CURSOR") == cursor

    async def _backfill(self, emit: Emit, units: tuple[str, ...] | None = None) -> None:
        settings = self._settings
        if units is not None:  # units that appeared while following: their window only
            start = await self._window_start(units)
            self._backfilled_records = 0
            await self._pump(
                build_journalctl_argv(
                    unit_filter(units),
                    settings.journalctl_args,
                    since=start,
                    lines=settings.backfill_max_records,
                ),
                emit,
                backfill=False,
                keep_cursor=True,
            )
            return
        units = self._units
        start = await self._window_start(units)
        if self._read_from is not None:  # incarnations the last run left open: read them again
            oldest = self._clock().timestamp() - self._settings.backfill_max_age_seconds
            start = min(start, max(oldest, self._read_from.timestamp() - 1.0))
        if self._history.cursor is None and self._history.since is not None:
            # a first start: what is written from then on is never skipped (log times ahead
            # of this clock could put the window's start after it)
            start = min(start, self._history.since.timestamp())
        stored = self._cursor
        if (
            stored is not None
            and not self._cursor_is_ours
            and not await self._is_cursor_known(stored)
        ):
            _log.warning(
                "journal_cursor_unknown",
                host=self.host,
                action="window_backfill",
                detail="the stored cursor is not in this journal (rotated away, or written "
                "on another machine): backfilling the window instead",
            )
            stored = self._cursor = None
            self._saved_position_unknown = True
        # A cursor read in this run (a backfill cut short by a failure) always wins: the
        # records before it were emitted already. A stored one wins when it is older than
        # the window, so nothing written while the daemon was down is skipped.
        use_cursor = stored is not None and (
            self._cursor_is_ours
            or (stored_time := cursor_time(stored)) is None
            or stored_time.timestamp() < start
        )
        _log.info(
            "journal_backfill_started",
            host=self.host,
            since=datetime.fromtimestamp(start, UTC).isoformat(),
            # the window's start, or the stored cursor when that is older (nothing skipped)
            reads_from="stored_cursor" if use_cursor else "window_start",
        )
        if stored is not None and not use_cursor:
            # The window begins before the stored cursor's stamp, but a record written after
            # the cursor may bear an earlier stamp than the window's start (another writer's
            # clock, a clock stepped back): read by time, it would never be read. So the window
            # is read by time up to the cursor only (history, or records this run applied
            # before a reload: they rebuild the state and move no position), and what follows
            # from the last record read on, in journal order, as the follow stream reads.
            await self._pump(
                build_journalctl_argv(
                    unit_filter(units),
                    settings.journalctl_args,
                    since=start,
                    lines=max(1, settings.backfill_max_records - self._backfilled_records),
                ),
                emit,
                backfill=True,
                stop_after=HistoryBoundary(stored),
            )
            stored = self._cursor
            use_cursor = True
        remaining = settings.backfill_max_records - self._backfilled_records
        argv = build_journalctl_argv(
            unit_filter(units),
            settings.journalctl_args,
            since=None if use_cursor else start,
            cursor=stored if use_cursor else None,
            lines=max(1, remaining),
        )
        try:
            if remaining > 0:  # else cut short: the follow stream reads on from the cursor
                await self._pump(argv, emit, backfill=True, resume=stored if use_cursor else None)
        except TransportError as error:
            if use_cursor and error.reason == "command_failed" and "cursor" in error.detail.lower():
                _log.warning(
                    "journal_cursor_unknown",
                    host=self.host,
                    action="window_backfill",
                    detail=error.detail,
                )
                self._cursor = None
                self._saved_position_unknown = True
                self._cursor_is_ours = False
                await self._pump(
                    build_journalctl_argv(
                        unit_filter(units),
                        settings.journalctl_args,
                        since=start,
                        lines=max(1, remaining),
                    ),
                    emit,
                    backfill=True,
                )
            else:
                raise
        count = self._backfilled_records  # over every attempt of this backfill
        if count >= settings.backfill_max_records:
            _log.warning(
                "journal_backfill_truncated",
                host=self.host,
                records=count,
                detail="the follower continues from the last record read",
            )
        after_main = self._history_open
        await self._backfill_quiet_units(emit, units, start)
        count = self._backfilled_records
        _log.info("journal_backfill_finished", host=self.host, records=count)
        if not count and not await self._has_entries():
            self._set_state(False, NO_JOURNAL_FILES, _NO_JOURNAL_FILES_DETAIL)  # up at a line
        # Cut short, the backfill resumes in the follow stream: history may still come there
        # (until the first record after the boundary closes it)
        self._history_open = after_main and count >= settings.backfill_max_records
        # The end of the backfill. Its new records handed their positions over already; its
        # history none (a piece of it is before the saved position). With no saved position
        # to keep (a first start, or a stored cursor this journal does not hold: a boundary
        # in time) and every record read, the last one read is the position: every record of
        # the units up to the boundary was history.
        by_time = self._history.cursor is None or self._saved_position_unknown
        position = self._cursor if by_time and not self._history_open else None
        await emit(JournalBatch(self.host, (), position, backfill=False))
        self._follow_since = start if self._cursor is None else None

    async def _backfill_quiet_units(
        self, emit: Emit, units: tuple[str, ...], window_start: float
    ) -> None:
        """Backfill units with no record in the window from their latest ``Started``.

        A unit that started more than ``backfill_max_age_seconds`` ago and has logged nothing
        since (an idle server) would otherwise have no state, and no series, after a restart.
        Its records from its latest start to the window are read (the window's are read
        already), bounded by what is left of ``backfill_max_records``.
        """
        settings = self._settings
        for unit in units:
            if unit in self._backfilled_units:
                continue
            argv = build_journalctl_argv(
                (unit,),
                settings.journalctl_args,
                until=window_start,
                lines=1,
                matches=(f"MESSAGE_ID={STARTED_MESSAGE_ID}",),
                output_fields=("UNIT", "USER_UNIT"),
            )
            try:
                output = await self._transport.run(argv, settings.query_timeout_seconds)
            except TransportError as error:
                if error.reason != "command_failed":
                    raise
                # one unit's query refused must not cost the host its backfill
                _log.warning(
                    "journal_unit_backfill_failed",
                    host=self.host,
                    units=[unit],
                    detail=error.detail[:300],
                )
                continue
            try:
                latest = int(orjson.loads(output.split(b"\n", 1)[0])["__REALTIME_TIMESTAMP"]) / 1e6
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # never started within the journal's reach
            forget = settings.forget_unit_after_seconds
            if forget > 0 and latest < self._clock().timestamp() - forget:
                last = await self._transport.run(
                    build_journalctl_argv(
                        (unit,),
                        settings.journalctl_args,
                        until=window_start,
                        lines=1,
                        output_fields=("UNIT",),
                    ),
                    settings.query_timeout_seconds,
                )
                try:
                    written = int(orjson.loads(last.split(b"\n", 1)[0])["__REALTIME_TIMESTAMP"])
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    written = 0
                if written / 1e6 < self._clock().timestamp() - forget:
                    continue  # silent for longer than a unit is remembered: not read again
            remaining = settings.backfill_max_records - self._backfilled_records
            if remaining <= 0:
                return
            _log.info(
                "journal_backfill_quiet_unit",
                host=self.host,
                unit=unit,
                since=datetime.fromtimestamp(latest, UTC).isoformat(),
            )
            self._history_open = True  # older than the window: maybe history
            await self._pump(
                build_journalctl_argv(
                    (unit,),
                    settings.journalctl_args,
                    since=latest,
                    until=window_start,
                    lines=remaining,
                ),
                emit,
                backfill=True,
                keep_cursor=True,
            )

    async def _follow(self, emit: Emit) -> None:
        """Follow every entry after the cursor; the Monitor keeps the configured units.

        No ``--unit`` matches here: systemd 252's ``journalctl --follow`` with several match
        terms (``-u`` is an OR of ``_SYSTEMD_UNIT=``, ``UNIT=`` and more; several units more
        still) skips runs of entries appended while it reads (a newer entry of one term's list
        is returned before an older one of another is linked; seen here: 4 to 30 of 130,000
        entries written at 10,000/s, every run; none without matches). Entries of other units
        are decoded and dropped by the ``TrackerSet``.
        """
        settings = self._settings
        cursor = self._cursor
        argv = build_journalctl_argv(
            (),
            settings.journalctl_args,
            follow=True,
            cursor=cursor,
            since=self._follow_since if cursor is None else None,
            lines="all" if cursor is not None or self._follow_since is not None else 0,
        )
        await self._pump(argv, emit, backfill=False, resume=cursor)

    async def _pump(
        self,
        argv: list[str],
        emit: Emit,
        *,
        backfill: bool,
        resume: str | None = None,
        keep_cursor: bool = False,
        stop_after: HistoryBoundary | None = None,
    ) -> int:
        """Stream ``argv`` into batches; ``resume``: the ``--cursor`` given, dropped if echoed.

        ``keep_cursor``: the records are older than the follow position (a new unit's
        backfill): hand them over without moving the follower's cursor. ``stop_after``: hand
        over the records up to that position only, with no position of theirs (history, or
        read before in this run), and stop at the first record after it; the follower's
        cursor is then the last one handed over (read on from there).
        """
        decoder = JournalJsonDecoder(self.host)
        seen: dict[str, int] = {}
        count = 0
        first = resume is not None
        stream = self._transport.stream(argv)
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                if not self._state.up:
                    self._set_state(True, "")
                records = decoder.feed(chunk)
                if decoder.skipped:
                    self._account(decoder.skipped, seen)
                if records and first:
                    first = False
                    if records[0].cursor == resume:
                        records = records[1:]  # --cursor=C starts with C: applied
                    elif not backfill and self._cursor_is_ours:
                        _log.warning(
                            "journal_cursor_unknown",
                            host=self.host,
                            action="resume_at_position",
                            detail="the last cursor read is no longer in the journal (rotated "
                            "and vacuumed): resuming at its position",
                        )
                if records and stop_after is not None:
                    upto = stop_after.split(records)
                    if upto:
                        await self._hand_over_read(records[:upto], emit, backfill)
                    if upto < len(records):
                        return count + upto
                    count += upto
                    continue
                if records:
                    cursor = decoder.last_cursor
                    if keep_cursor:
                        cursor = self._cursor
                    elif cursor is not None:
                        self._cursor = cursor
                        self._cursor_is_ours = True
                    count += len(records)
                    self.records_total += len(records)
                    if backfill:
                        self._backfilled_records += len(records)
                        self._backfilled_units.update([record.unit for record in records])
                    if self._history_open:
                        split = self._history.split(records)
                        if split < len(records):
                            self._history_open = False  # the rest is new
                        if split:
                            # no position: history lies at or before the boundary, where the
                            # saved position is already (a piece of it read on its own must
                            # not move it back, to be saved with the counters of the boundary)
                            history = tuple(records[:split])
                            records = records[split:]
                            await emit(
                                JournalBatch(self.host, history, None, backfill, history=True)
                            )
                        if not records:
                            continue
                    await emit(JournalBatch(self.host, tuple(records), cursor, backfill))
        if not self._state.up:
            self._set_state(True, "")
        return count

    async def _hand_over_read(self, records: Sequence[Record], emit: Emit, backfill: bool) -> None:
        """Hand over records up to the stored position: no position moves (the saved one is
        at or after them), history split off as it is everywhere."""
        self.records_total += len(records)
        if backfill:
            self._backfilled_records += len(records)
            self._backfilled_units.update([record.unit for record in records])
        if records[-1].cursor is not None:
            self._cursor = records[-1].cursor
            self._cursor_is_ours = True
        split = self._history.split(records) if self._history_open else 0
        if split < len(records):
            self._history_open = False
        if split:
            history = tuple(records[:split])
            await emit(JournalBatch(self.host, history, None, backfill, history=True))
        if split < len(records):
            await emit(JournalBatch(self.host, tuple(records[split:]), None, backfill))

    def _account(self, skipped: Mapping[str, int], seen: dict[str, int]) -> None:
        for reason, value in skipped.items():
            new = value - seen.get(reason, 0)
            if new <= 0:
                continue
            if reason not in self._skipped:
                _log.warning("journal_records_skipped", host=self.host, reason=reason)
            self._skipped[reason] = self._skipped.get(reason, 0) + new
            seen[reason] = value
