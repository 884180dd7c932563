"""``JournalFollower``: one host's journal → batches of records for the Monitor (edge: asyncio).

For each host the follower runs ``journalctl`` through a ``Transport`` (a local child, or an
SSH channel on the host's shared connection):

1. **Window.** ``journalctl -u U… MESSAGE_ID=<Started> --since=@<now-max_age>`` lists the units'
   recent starts; the backfill begins at the ``backfill_max_invocations``-th latest start of
   every unit (at most ``backfill_max_age_seconds`` back), so phase, incarnation and the last
   crash are right at the first scrape. A stored cursor older than that window wins, so nothing
   written while the daemon was down is skipped.
2. **Backfill.** ``journalctl -o json -a -u U… --since=@T`` (or ``--after-cursor=C``) read to
   its end. Without ``-f`` journalctl shows every boot, so a reboot in the window is seen.
3. **Follow.** ``journalctl -o json -a -f --after-cursor=<last>`` (systemd ≥ 250 limits
   ``--follow`` to the current boot, which is what following means).

Every chunk is decoded (``JournalJsonDecoder``: bytes, never strict UTF-8) and handed over as a
``JournalBatch`` with the last cursor; the Monitor applies it and marks the cursor. When the
stream ends or the transport fails the follower reconnects with capped exponential backoff and
jitter (tenacity) and resumes with ``--after-cursor``, so nothing is lost or doubled (the
tracker also drops records whose cursor it already applied). It logs once per state change.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
import structlog
from tenacity import wait_exponential_jitter

from vllm_sentinel.errors import TransportError
from vllm_sentinel.journal_json import JournalJsonDecoder
from vllm_sentinel.record import Record
from vllm_sentinel.snapshot import CollectorState
from vllm_sentinel.transport import Transport

__all__ = [
    "STARTED_MESSAGE_ID",
    "FollowerSettings",
    "JournalBatch",
    "JournalFollower",
    "build_journalctl_argv",
    "cursor_realtime",
]

STARTED_MESSAGE_ID = "39f53479d3a045ac8e117862248231bf"
"""systemd's catalog id of "Started <unit>" (src/core/job.c, ``SD_MESSAGE_UNIT_STARTED``)."""

_CURSOR_TIME = re.compile(r"(?:^|;)t=([0-9a-f]{1,16})(?:;|$)")
_log = structlog.get_logger("vllm_sentinel.journal")


@dataclass(frozen=True, slots=True)
class JournalBatch:
    """Records read from one host, and the cursor of the last one (``None`` if none had one).

    ``backfill`` is True for records of the startup backfill; an empty batch with
    ``backfill=False`` marks its end.
    """

    host: str
    records: tuple[Record, ...]
    cursor: str | None
    backfill: bool = False


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


def build_journalctl_argv(
    units: Sequence[str],
    extra_args: Sequence[str] = (),
    *,
    follow: bool = False,
    since: float | None = None,
    after_cursor: str | None = None,
    lines: int | str | None = None,
    matches: Sequence[str] = (),
    output_fields: Sequence[str] = (),
) -> list[str]:
    """Build a ``journalctl`` argv (a list: never a shell string).

    Args:
        units: unit names or globs, one ``--unit`` each (validated by the config).
        extra_args: configured options such as ``--directory=/var/log/journal/remote``.
        follow: add ``--follow``.
        since: Unix seconds for ``--since=@…``.
        after_cursor: resume after this cursor.
        lines: ``--lines`` limit (a number or ``"all"``).
        matches: ``FIELD=value`` journal matches.
        output_fields: restrict the JSON fields journalctl sends.
    """
    argv = ["journalctl", "--output=json", "--all", "--no-pager", "--quiet"]
    argv.extend(extra_args)
    argv.extend(f"--unit={unit}" for unit in units)
    if follow:
        argv.append("--follow")
    if after_cursor is not None:
        argv.append(f"--after-cursor={after_cursor}")
    elif since is not None:
        argv.append(f"--since=@{since:.6f}")
    if lines is not None:
        argv.append(f"--lines={lines}")
    if output_fields:
        argv.append("--output-fields=" + ",".join(output_fields))
    argv.extend(matches)
    return argv


def cursor_realtime(cursor: str) -> float | None:
    """The realtime (Unix seconds) inside a journal cursor, if it has the usual ``t=`` part.

    systemd documents cursors as opaque; this is used only to compare a stored cursor with
    the backfill window, and an unreadable cursor is treated as "older than the window".
    """
    found = _CURSOR_TIME.search(cursor)
    return int(found.group(1), 16) / 1e6 if found else None


Emit = Callable[[JournalBatch], Awaitable[None]]


class JournalFollower:
    """Backfill then follow one host's journal, reconnecting forever; cancel to stop.

    Args:
        host: the host name (labels, logs).
        transport: runs ``journalctl`` there.
        settings: units, extra arguments, bounds, backoff.
        cursor: the last applied cursor from the cursor store, if any.
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
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.host = host
        self._transport = transport
        self._settings = settings
        self._cursor = cursor
        self._clock = clock
        self._sleep = sleep
        self._wait = wait_exponential_jitter(
            initial=settings.reconnect_initial_seconds,
            max=settings.reconnect_max_seconds,
            jitter=settings.reconnect_initial_seconds,
        )
        self._state = CollectorState(up=False, since=None, reason="starting")
        self._skipped: dict[str, int] = {}
        self._follow_since: float | None = None
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

    def _set_state(self, up: bool, reason: str, detail: str = "") -> None:
        previous = self._state
        if previous.up == up and previous.reason == reason:
            return
        reconnects = previous.reconnects_total + (1 if up and previous.since is not None else 0)
        self._state = CollectorState(up, self._clock(), reason, reconnects)
        if up:
            _log.info("journal_collector_up", host=self.host, cursor=self._cursor is not None)
        else:
            _log.warning("journal_collector_down", host=self.host, reason=reason, detail=detail)

    async def run(self, emit: Emit) -> None:
        """Backfill, then follow, until cancelled."""
        attempt = 0
        backfilled = False
        while True:
            try:
                if not backfilled:
                    await self._backfill(emit)
                    backfilled = True
                await self._follow(emit)
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

    def _wait_seconds(self, attempt: int) -> float:
        from tenacity import RetryCallState

        state = RetryCallState(None, None, (), {})
        state.attempt_number = attempt
        return float(self._wait(state))

    async def _window_start(self) -> float:
        settings = self._settings
        now = self._clock().timestamp()
        start = now - settings.backfill_max_age_seconds
        argv = build_journalctl_argv(
            settings.units,
            settings.journalctl_args,
            since=start,
            matches=(f"MESSAGE_ID={STARTED_MESSAGE_ID}",),
            output_fields=("UNIT", "USER_UNIT"),
        )
        output = await self._transport.run(argv, settings.query_timeout_seconds)
        starts: dict[str, list[float]] = {}
        for line in output.splitlines():
            try:
                entry = orjson.loads(line)
                unit = entry.get("UNIT") or entry.get("USER_UNIT")
                when = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                continue
            if isinstance(unit, str):
                starts.setdefault(unit, []).append(when)
        keep = settings.backfill_max_invocations
        if not starts or any(len(times) < keep for times in starts.values()):
            return start
        return max(start, min(sorted(times)[-keep] for times in starts.values()))

    async def _backfill(self, emit: Emit) -> None:
        settings = self._settings
        start = await self._window_start()
        stored = self._cursor
        use_cursor = stored is not None and ((cursor_realtime(stored) or 0.0) < start)
        argv = build_journalctl_argv(
            settings.units,
            settings.journalctl_args,
            since=None if use_cursor else start,
            after_cursor=stored if use_cursor else None,
            lines=settings.backfill_max_records,
        )
        _log.info(
            "journal_backfill_started",
            host=self.host,
            since=datetime.fromtimestamp(start, UTC).isoformat(),
            from_cursor=use_cursor,
        )
        try:
            count = await self._pump(argv, emit, backfill=True)
        except TransportError as error:
            if use_cursor and "cursor" in error.detail.lower():
                _log.warning("journal_cursor_unknown", host=self.host, detail=error.detail)
                self._cursor = None
                count = await self._pump(
                    build_journalctl_argv(
                        settings.units,
                        settings.journalctl_args,
                        since=start,
                        lines=settings.backfill_max_records,
                    ),
                    emit,
                    backfill=True,
                )
            else:
                raise
        if count >= settings.backfill_max_records:
            _log.warning(
                "journal_backfill_truncated",
                host=self.host,
                records=count,
                detail="the follower continues from the last record read",
            )
        _log.info("journal_backfill_finished", host=self.host, records=count)
        await emit(JournalBatch(self.host, (), self._cursor, backfill=False))
        self._follow_since = start if self._cursor is None else None

    async def _follow(self, emit: Emit) -> None:
        settings = self._settings
        argv = build_journalctl_argv(
            settings.units,
            settings.journalctl_args,
            follow=True,
            after_cursor=self._cursor,
            since=self._follow_since if self._cursor is None else None,
            lines="all" if self._cursor is not None or self._follow_since is not None else 0,
        )
        await self._pump(argv, emit, backfill=False)

    async def _pump(self, argv: list[str], emit: Emit, *, backfill: bool) -> int:
        decoder = JournalJsonDecoder(self.host)
        seen: dict[str, int] = {}
        count = 0
        stream = self._transport.stream(argv)
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for chunk in stream:
                if not self._state.up:
                    self._set_state(True, "")
                records = decoder.feed(chunk)
                if decoder.skipped:
                    self._account(decoder.skipped, seen)
                if records:
                    cursor = decoder.last_cursor
                    if cursor is not None:
                        self._cursor = cursor
                    count += len(records)
                    self.records_total += len(records)
                    await emit(JournalBatch(self.host, tuple(records), cursor, backfill))
        if not self._state.up:
            self._set_state(True, "")
        return count

    def _account(self, skipped: Mapping[str, int], seen: dict[str, int]) -> None:
        for reason, value in skipped.items():
            new = value - seen.get(reason, 0)
            if new <= 0:
                continue
            if reason not in self._skipped:
                _log.warning("journal_records_skipped", host=self.host, reason=reason)
            self._skipped[reason] = self._skipped.get(reason, 0) + new
            seen[reason] = value
