"""``UnitTracker``: records of one unit → incarnations, phases and crash causes (core: pure).

The tracker is the one place that decides. It reads each record line by line
(``vllm_line.parse_line``), lets the per-process ``TracebackAssembler`` take traceback lines,
matches the rest against the ``markers`` catalog and systemd's messages, and moves the right
incarnation:

* **Attribution.** A record goes to the incarnation of its systemd invocation id; without one
  (plain text), to the incarnation that owns its PID if that is an older one, else to the
  current one. A version banner or systemd's ``Started`` starts a new incarnation in text
  logs; a banner also frees the PIDs older incarnations owned (a restarted container reuses
  them). So a late line of a dead incarnation only ever touches that incarnation.
* **Phases** only move forward within an incarnation (``phases.is_forward``), and so do the
  times of its timeline: a line from the past enters its phase (or ends) at the last time.
* **Crashes.** Evidence (exceptions, failure lines, systemd verdicts) is collected per
  incarnation; the incarnation ends ``crashed`` on systemd's non-zero exit or failure, an
  uncaught (raw) traceback during startup, or a failure line after which the process exits.
  A logged traceback during startup makes a crash *pending*: confirmed by the exit, by a new
  incarnation, or at the end of a replay (``finish``). The root cause is chosen from the
  evidence when asked (``causes.choose_root_cause``), so lines that arrive late still count;
  a crash is *settled* into ``crashes_total`` once ``settle_seconds`` of log time have passed
  (or at ``advance``/``finish``), with the cause known then.

Deterministic: the same records in the same order always give the same snapshot. Records whose
journal cursor was already applied are ignored (``feed`` returns False), so re-reading after a
reconnect is harmless.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from types import MappingProxyType

from vllm_sentinel.causes import (
    BenignMatcher,
    CrashCause,
    Evidence,
    EvidenceKind,
    choose_root_cause,
    classify_exception,
    classify_stderr_line,
    is_request_error,
)
from vllm_sentinel.markers import (
    Event,
    MarkerMatch,
    MarkerMatcher,
    SystemdEvent,
    match_systemd,
)
from vllm_sentinel.phases import STARTUP_PHASES, Outcome, Phase, is_forward
from vllm_sentinel.record import Record
from vllm_sentinel.snapshot import (
    CrashInfo,
    IncarnationSnapshot,
    PhaseEntry,
    Progress,
    UnitSnapshot,
)
from vllm_sentinel.tracebacks import ExceptionEvent, TracebackAssembler
from vllm_sentinel.vllm_line import LineAnatomy, LineKind, Role, parse_line

__all__ = ["TrackerSet", "UnitTracker"]

_GIB = 1 << 30
_MAX_EVIDENCE = 32
_MAX_PIDS = 64
_POST_READY_CAUSE_WINDOW = timedelta(minutes=5)
_STARTUP = frozenset(STARTUP_PHASES)
_PHASE_RANK: Mapping[Phase, int] = MappingProxyType({p: i for i, p in enumerate(Phase)})
_TP_SIZE = re.compile(r"tensor_parallel_size[=':\s]+(\d{1,4})")
_CURSOR_SEQ = re.compile(r"s=([0-9a-f]+);i=([0-9a-f]+)")
_HEX_DIGITS = "0123456789abcdef"
_HALF_YEAR = timedelta(days=180)
_ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})
_MAX_CACHED_UNITS = 1024
_JSON = LineKind.JSON
_HEADER_STAMP_LENGTH = len("MM-DD HH:MM:SS")
# Marker events whose only effect is a phase move (no figures, no special handling).
_PLAIN_EVENTS = frozenset(Event) - {
    Event.ENGINE_INIT,
    Event.SERVER_CONFIG,
    Event.FATAL,
    Event.PORT_CONFLICT,
    Event.PROCESS_STARTED,
    Event.SHUTDOWN,
    Event.SHUTDOWN_COMPLETE,
}
_MANAGER_IDENTS = frozenset({"systemd", "kernel"})
_LOW_LEVELS: Mapping[str, str] = MappingProxyType(
    {level: level.lower() for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
)
_NOT_PROCESS_DEATH = ("Exception ignored in", "Exception in thread")
_STOP_SIGNALS = frozenset({"TERM", "INT", "KILL", "15", "2", "9"})
_STOP_STATUSES = frozenset({0, 130, 137, 143})
_END_EVENTS = frozenset(
    {
        SystemdEvent.MAIN_PROCESS_EXITED,
        SystemdEvent.UNIT_FAILED,
        SystemdEvent.UNIT_STOPPED,
        SystemdEvent.UNIT_DEACTIVATED,
    }
)
_UNCONFIRMED_GRACE = 10  # × settle_seconds: how long a journal incarnation waits for systemd


@dataclass(slots=True)
class _Incarnation:
    """Mutable state of one incarnation; private to the tracker (snapshots are frozen)."""

    serial: int
    id: str | None
    started_at: datetime | None
    phase: Phase = Phase.STARTING
    furthest: Phase = Phase.STARTING
    timeline: list[PhaseEntry] = field(default_factory=list)
    outcome: Outcome = Outcome.RUNNING
    ended_at: datetime | None = None
    crash_phase: Phase | None = None
    evidence: list[Evidence] = field(default_factory=list)
    fatal_pending_at: datetime | None = None
    stop_requested: bool = False
    stop_by_manager: bool = False
    settled: bool = False
    counted: bool = True  # the crash counts into crashes_total (not learnt from history)
    settle_from: datetime | None = None  # the latest end signal (exit, failure) seen
    confirmed: bool = False  # systemd (or a newer incarnation) confirmed the end
    has_banner: bool = False
    pids: dict[int, None] = field(default_factory=dict)
    benign_errors: int = 0
    records: int = 0
    last_record_at: datetime | None = None
    last_progress_at: datetime | None = None
    vllm_version: str | None = None
    model: str | None = None
    model_from_engine: bool = False
    tensor_parallel_size: int | None = None
    max_rank: int | None = None
    shards_loaded: int | None = None
    shards_total: int | None = None
    model_weights_bytes: int | None = None
    weights_load_seconds: float | None = None
    compile_seconds: float | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    cuda_graph_bytes: int | None = None
    cuda_graph_capture_seconds: float | None = None
    engine_init_seconds: float | None = None

    @property
    def ended(self) -> bool:
        return self.outcome in (Outcome.CRASHED, Outcome.STOPPED)

    @property
    def pristine(self) -> bool:
        return self.records == 0 and not self.ended


def _evidence_rank(item: Evidence) -> tuple[int, float, int]:
    return (int(item.kind), item.at.timestamp() if item.at else float("inf"), item.seq)


def _not_before(time: datetime | None, floor: datetime | None) -> datetime | None:
    """``time``, or ``floor`` when it is earlier: a timeline never goes back.

    Log lines are not always in time order (threads, processes, a log pasted twice, the old
    incarnation's last line taken from the new process's first): a phase entered, or an end,
    at an earlier time than the timeline's last entry is placed at that entry's time.
    """
    if time is not None and floor is not None and time < floor:
        return floor
    return time


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.replace(",", "")) if text is not None else None
    except ValueError:
        return None


def _gib_bytes(text: str | None) -> int | None:
    value = _float(text)
    return int(value * _GIB) if value is not None else None


_FIGURES: Mapping[Event, tuple[tuple[str, str, Callable[[str | None], float | int | None]], ...]]
_FIGURES = MappingProxyType(
    {  # event → (named group of the marker, incarnation field, conversion)
        Event.WEIGHTS_LOADED: (("s", "weights_load_seconds", _float),),
        Event.MODEL_LOADED: (("gib", "model_weights_bytes", _gib_bytes),),
        Event.COMPILE_FINISHED: (("s", "compile_seconds", _float),),
        Event.KV_CACHE_MEMORY: (("gib", "kv_cache_bytes", _gib_bytes),),
        Event.KV_CACHE_SIZED: (("tokens", "kv_cache_tokens", _int),),
        Event.GRAPH_CAPTURE_FINISHED: (
            ("gib", "cuda_graph_bytes", _gib_bytes),
            ("s", "cuda_graph_capture_seconds", _float),
        ),
        Event.ENGINE_READY: (("s", "engine_init_seconds", _float),),
    }
)
"""The figures a marker line carries: where each named group goes, converted to base units."""


class UnitTracker:
    """The state machine of one unit.

    Args:
        unit: the systemd unit name (or ``vllm`` for plain text).
        host: the host name, for snapshots.
        matcher: the marker matcher (shareable, immutable).
        benign: the benign-line matcher built from config.
        max_incarnations: how many incarnations to keep (older ones are forgotten; their
            counts stay in the counters).
        reference_year: year for timestamps that have none (vLLM's header) until a record
            with a full time is seen.
        settle_seconds: log-time delay before a crash is counted with its cause.

    Attributes:
        counting: while False, records rebuild incarnations, phases and the last crash but a
            start or a crash they show does not count into ``starts_total`` /
            ``crashes_total``: the daemon sets it for history it has reported before (records
            up to its stored cursor) and for the backfill of its first start, so that the
            counters of a restarted daemon hold only what is new to Prometheus. A crash counts
            when its end is seen while counting.
    """

    def __init__(
        self,
        unit: str,
        host: str | None = None,
        *,
        matcher: MarkerMatcher | None = None,
        benign: BenignMatcher | None = None,
        max_incarnations: int = 8,
        reference_year: int = 1970,
        settle_seconds: float = 30.0,
    ) -> None:
        self.unit = unit
        self.host = host
        self._matcher = matcher or MarkerMatcher()
        self._benign = benign or BenignMatcher()
        self._max_incarnations = max(2, max_incarnations)
        self._year = reference_year
        self._settle = timedelta(seconds=settle_seconds)
        self._incarnations: deque[_Incarnation] = deque()
        self._by_id: dict[str, _Incarnation] = {}
        self._pid_owner: dict[int, _Incarnation] = {}
        self._tracebacks = TracebackAssembler()
        self._serial = 0
        self._seq = 0
        self._last_time: datetime | None = None
        self._latest_time: datetime | None = None
        self._seen_seq: dict[str, int] = {}
        self._recent_cursors: deque[str] = deque(maxlen=64)
        self._cursor_prefix = ""  # "s=<seqnum id>;i=" of the last cursor read, and the id
        self._cursor_seqnum_id = ""
        self._stamp_text: str | None = None  # the last header stamp read, and its time
        self._stamp_time: datetime | None = None
        self._stamp_year = 0
        self._unsettled: list[_Incarnation] = []
        self.counting = True
        self.starts_total = 0
        self.crashes_total: Counter[CrashCause] = Counter()
        self.records_by_level: Counter[str] = Counter()
        self._level_names = dict(_LOW_LEVELS)  # a plain dict: read on every line
        self.benign_errors_total = 0
        self.duplicates_total = 0
        self.recognized_lines = 0  # lines that looked like vLLM's or systemd's (replay checks)
        self._phase_durations: dict[Phase, float] = {}
        self._startup_duration: float | None = None
        self._last_evicted_crash: CrashInfo | None = None
        self._snapshot: UnitSnapshot | None = None  # the last snapshot, while nothing changed

    # --- input ---------------------------------------------------------------------------

    def feed(self, record: Record) -> bool:
        """Apply one record; return False when it was already applied (same cursor)."""
        return self.feed_many((record,)) == 1

    def feed_many(self, records: Iterable[Record]) -> int:
        """Apply records in order (as ``feed`` each); return how many were not duplicates."""
        self._snapshot = None
        applied = 0
        feed_line = self._feed_line
        for record in records:
            cursor = record.cursor
            if cursor is not None and self._is_duplicate(cursor):
                self.duplicates_total += 1
                continue
            applied += 1
            time = record.realtime
            if time is not None:
                self._last_time = time
                self._year = time.year
                if self._latest_time is None or time > self._latest_time:
                    self._latest_time = time
            message = record.message
            if record.from_manager or record.syslog_identifier in _MANAGER_IDENTS:
                for line in message.split("\n") if "\n" in message else (message,):
                    self._feed_manager(record, line, time or self._last_time)
            elif "\n" in message:
                for line in message.split("\n"):
                    feed_line(record, line, time)
            else:
                feed_line(record, message, time)
            if self._unsettled:
                self._settle_due(self._latest_time)
        return applied

    def advance(self, now: datetime) -> bool:
        """Let wall-clock time pass: settle crashes that ended ``settle_seconds`` before ``now``.

        The Monitor calls this on its tick, but not while a host's journal is being
        backfilled: old records would otherwise look settled before their late lines arrive.

        Returns:
            True when something settled: the snapshot may have changed (the Monitor rebuilds
            only the snapshots of trackers that changed).
        """
        if not self._unsettled:
            return False
        before = len(self._unsettled)
        self._settle_due(now)
        if len(self._unsettled) == before:
            return False
        self._snapshot = None
        return True

    def finish(self) -> None:
        """End of input (replay): confirm pending crashes and settle every crash."""
        self._snapshot = None
        for incarnation in self._incarnations:
            if not incarnation.ended and incarnation.fatal_pending_at is not None:
                self._end(incarnation, Outcome.CRASHED, incarnation.last_record_at)
        for incarnation in list(self._unsettled):
            self._settle_one(incarnation)
        self._unsettled.clear()

    def _is_duplicate(self, cursor: str) -> bool:
        prefix = self._cursor_prefix
        if prefix and cursor.startswith(prefix):
            # Hot path: the same journal file as the last record ("s=<id>;i=<seqnum>;…").
            start = len(prefix)
            end = cursor.find(";", start)
            digits = cursor[start:end] if end >= 0 else cursor[start:]
            if digits and not digits.strip(_HEX_DIGITS):
                seqnum = int(digits, 16)
                last = self._seen_seq.get(self._cursor_seqnum_id)
                if last is not None:
                    if seqnum <= last:
                        return True
                    self._seen_seq[self._cursor_seqnum_id] = seqnum
                    return False
                return self._is_seen(self._cursor_seqnum_id, seqnum)
        found = _CURSOR_SEQ.search(cursor)
        if found is None:
            if cursor in self._recent_cursors:
                return True
            self._recent_cursors.append(cursor)
            return False
        if found.start() == 0:
            self._cursor_prefix = cursor[: found.start(2)]
            self._cursor_seqnum_id = found.group(1)
        return self._is_seen(found.group(1), int(found.group(2), 16))

    def _is_seen(self, seqnum_id: str, seqnum: int) -> bool:
        last = self._seen_seq.get(seqnum_id)
        if last is not None and seqnum <= last:
            return True
        if last is None and len(self._seen_seq) >= 64:
            del self._seen_seq[next(iter(self._seen_seq))]
        self._seen_seq[seqnum_id] = seqnum
        return False

    def _line_time(self, stamp: str | None) -> datetime | None:
        """The time of a line without a record time: vLLM's header stamp, else the last time."""
        if stamp is None:
            return self._last_time
        last = self._last_time
        if (
            stamp == self._stamp_text
            and last is self._stamp_time
            and self._year == self._stamp_year
        ):
            return last  # the same second as the line before: the same result
        if len(stamp) != _HEADER_STAMP_LENGTH:
            return self._dated_line_time(stamp)
        try:
            time = datetime(
                self._year,
                int(stamp[0:2]),
                int(stamp[3:5]),
                int(stamp[6:8]),
                int(stamp[9:11]),
                int(stamp[12:14]),
                tzinfo=UTC,
            )
        except ValueError:
            return last
        if last is not None and last - time > _HALF_YEAR:
            try:
                time = time.replace(year=time.year + 1)
            except ValueError:  # past year 9999, or 29 February into a common year
                return last
        self._last_time = time
        self._stamp_text, self._stamp_time, self._stamp_year = stamp, time, self._year
        return time

    def _dated_line_time(self, stamp: str) -> datetime | None:
        """The time of a stamp with a full date (a JSON record's ``asctime``), else the last.

        Without a zone the stamp is read as UTC, as vLLM's header is; its year becomes the year
        of the stamps that have none.
        """
        try:
            time = datetime.fromisoformat(stamp)
            time = time.replace(tzinfo=UTC) if time.tzinfo is None else time.astimezone(UTC)
        except (ValueError, OverflowError):  # OverflowError: year 1 with a positive offset
            return self._last_time
        self._year = time.year
        self._last_time = time
        self._stamp_text, self._stamp_time, self._stamp_year = stamp, time, self._year
        return time

    def _feed_line(
        self,
        record: Record,
        line: str,
        record_time: datetime | None,
        anatomy: LineAnatomy | None = None,
    ) -> None:
        parsed = parse_line(line) if anatomy is None else anatomy
        body, kind, level, stamp, _, role, rank, line_pid, _ = parsed
        if kind is _JSON and anatomy is None and "\n" in body:
            # vLLM's JSON formatter puts a whole traceback in one record (``exc_info``): each
            # of its lines is read as a line of that process with the record's header.
            for part in body.split("\n"):
                self._feed_line(record, part, record_time, parsed._replace(body=part))
            return
        time = record_time if record_time is not None else self._line_time(stamp)
        pid = line_pid or record.pid
        has_header = kind is LineKind.VLLM or kind is LineKind.JSON
        consumed, exception, started = self._tracebacks.feed(pid, body, level, has_header)
        found = None if consumed else self._matcher.match(body, kind)
        event = found.marker.event if found is not None else None
        # _attribute, inlined for the common cases: a known invocation id, or none and the
        # current incarnation.
        incarnations = self._incarnations
        invocation_id = record.invocation_id
        if invocation_id is not None:
            incarnation = self._by_id.get(invocation_id) or self._attribute(record, pid, time)
        elif incarnations and (
            pid is None or pid in incarnations[-1].pids or pid not in self._pid_owner
        ):
            incarnation = incarnations[-1]
        else:
            incarnation = self._attribute(record, pid, time)
        if (
            event is Event.PROCESS_STARTED
            and record.invocation_id is None
            and incarnation is self._current()
            and (
                incarnation.has_banner
                or incarnation.ended
                or incarnation.fatal_pending_at is not None
                or incarnation.phase is not Phase.STARTING
            )
        ):
            incarnation = self._start_incarnation(None, time)
            self._release_pids(incarnation)
            self._tracebacks.reset()  # the old processes' tracebacks end with them
        self.records_by_level[self._level_names.get(level, "none") if level else "none"] += 1
        if kind is not LineKind.RAW or consumed or found is not None or line_pid is not None:
            self.recognized_lines += 1  # vLLM's shape: a header, prefix, marker or traceback
        if incarnation.started_at is None and time is not None:
            incarnation.started_at = time  # the first line with a time (excerpts start anywhere)
            if incarnation.timeline[0].entered_at is None:
                incarnation.timeline[0] = PhaseEntry(Phase.STARTING, time)
        incarnation.records += 1
        incarnation.last_record_at = time
        if pid is not None and pid not in incarnation.pids:
            self._claim_pid(incarnation, pid)
        if rank is not None and (incarnation.max_rank is None or rank > incarnation.max_rank):
            incarnation.max_rank = rank
        if event is not Event.HEARTBEAT:
            incarnation.last_progress_at = time
        if started and not has_header:
            self._on_uncaught_traceback(incarnation, pid, time)
        if exception is not None:
            self._on_exception(incarnation, exception, kind, role, time)
        elif found is not None:
            self._on_marker(incarnation, found, body, time)
        elif (
            not consumed
            and kind is LineKind.RAW
            and incarnation.phase in _STARTUP
            and not incarnation.ended
        ):
            cause = classify_stderr_line(body)
            if cause is not None:
                self._add_evidence(incarnation, cause, EvidenceKind.NOISE, "", body, time)
        if level in _ERROR_LEVELS and not consumed and self._benign.matches(body):
            incarnation.benign_errors += 1
            self.benign_errors_total += 1

    # --- attribution ---------------------------------------------------------------------

    def _current(self) -> _Incarnation | None:
        return self._incarnations[-1] if self._incarnations else None

    def _attribute(
        self, record: Record, pid: int | None, time: datetime | None, midway: bool = True
    ) -> _Incarnation:
        """The incarnation ``record`` belongs to, started if new (``midway``: by a record that
        is not systemd's ``Started``)."""
        invocation_id = record.invocation_id
        if invocation_id is not None:
            incarnation = self._by_id.get(invocation_id)
            if incarnation is None:
                current = self._current()
                if current is not None and current.id is None and current.pristine:
                    current.id = invocation_id
                    self._by_id[invocation_id] = current
                    return current
                # The first incarnation a tracker meets midway began before what it reads: a
                # restarted daemon resuming at its cursor saw (and counted) its start already.
                counted = not midway or bool(self._incarnations)
                incarnation = self._start_incarnation(invocation_id, time, counted)
            return incarnation
        current = self._current()
        if current is None:
            return self._start_incarnation(None, time)
        if pid is not None and pid not in current.pids:
            owner = self._pid_owner.get(pid)
            if owner is not None and owner is not current:
                return owner
        return current

    def _release_pids(self, keeper: _Incarnation) -> None:
        """Give up the PIDs older incarnations own: a text banner began ``keeper``.

        A restarted container reuses its PIDs (``pid=1``, the same engine PID): from now on
        their lines belong to the new process, not to the dead incarnation that owned them.
        """
        owners = self._pid_owner
        for incarnation in self._incarnations:
            if incarnation is keeper:
                continue
            for pid in incarnation.pids:
                if owners.get(pid) is incarnation:
                    del owners[pid]

    def _claim_pid(self, incarnation: _Incarnation, pid: int) -> None:
        if pid in incarnation.pids:
            return
        if len(incarnation.pids) < _MAX_PIDS:
            incarnation.pids[pid] = None
            self._pid_owner[pid] = incarnation
        else:  # not kept: owning it here would outlive the incarnation's eviction (a leak)
            self._pid_owner.pop(pid, None)

    def _supersede(self, previous: _Incarnation) -> None:
        """End an incarnation that a reboot or a newer incarnation replaced."""
        previous.confirmed = True
        if previous.ended:
            return
        if previous.fatal_pending_at is not None:
            self._end(previous, Outcome.CRASHED, previous.last_record_at)
        elif previous.stop_requested:
            self._end(previous, Outcome.STOPPED, previous.last_record_at)
        else:
            self._add_evidence(
                previous,
                CrashCause.UNKNOWN,
                EvidenceKind.SIGNAL,
                "",
                "ended without an exit record (superseded)",
                previous.last_record_at,
            )
            self._end(previous, Outcome.CRASHED, previous.last_record_at)

    def _start_incarnation(
        self, invocation_id: str | None, time: datetime | None, counted: bool = True
    ) -> _Incarnation:
        previous = self._current()
        if previous is not None:
            self._supersede(previous)
        self._serial += 1
        incarnation = _Incarnation(self._serial, invocation_id, time)
        incarnation.timeline.append(PhaseEntry(Phase.STARTING, time))
        self._incarnations.append(incarnation)
        if invocation_id is not None:
            self._by_id[invocation_id] = incarnation
        if self.counting and counted:
            self.starts_total += 1
        while len(self._incarnations) > self._max_incarnations:
            self._evict(self._incarnations.popleft())
        return incarnation

    def _evict(self, incarnation: _Incarnation) -> None:
        if incarnation.id is not None:
            self._by_id.pop(incarnation.id, None)
        for pid in incarnation.pids:
            if self._pid_owner.get(pid) is incarnation:
                del self._pid_owner[pid]
        if incarnation in self._unsettled:
            self._settle_one(incarnation)
            self._unsettled.remove(incarnation)
        if incarnation.outcome is Outcome.CRASHED:
            self._last_evicted_crash = self._crash_info(incarnation)

    # --- systemd -------------------------------------------------------------------------

    def _feed_manager(self, record: Record, line: str, time: datetime | None) -> None:
        matched = match_systemd(line, record.message_id)
        if matched is None:
            return
        self.recognized_lines += 1
        event, groups = matched
        if event is SystemdEvent.BOOT:
            current = self._current()
            if current is not None:
                self._supersede(current)
            return
        if event in (SystemdEvent.UNIT_STARTING, SystemdEvent.UNIT_STARTED):
            if record.invocation_id is not None:
                incarnation = self._attribute(record, None, time, False)
            else:
                current = self._current()
                incarnation = (
                    current
                    if current is not None and current.pristine
                    else self._start_incarnation(None, time)
                )
            if incarnation.started_at is None or (
                time is not None and incarnation.pristine and time < incarnation.started_at
            ):
                incarnation.started_at = time
                incarnation.timeline[0] = PhaseEntry(Phase.STARTING, time)
            return
        target = self._attribute(record, None, time) if record.invocation_id else self._current()
        if target is None:
            return
        incarnation = target
        if event in _END_EVENTS:
            incarnation.confirmed = True
        if event is SystemdEvent.UNIT_STOPPING:
            if not incarnation.ended:
                incarnation.stop_requested = True
                incarnation.stop_by_manager = True
                self._advance(incarnation, Phase.STOPPING, time)
        elif event in (SystemdEvent.UNIT_STOPPED, SystemdEvent.UNIT_DEACTIVATED):
            self._end_cleanly(incarnation, time)
        elif event is SystemdEvent.MAIN_PROCESS_EXITED:
            self._on_exit(incarnation, groups, time)
        elif event is SystemdEvent.UNIT_FAILED:
            result = groups.get("result") or ""
            if incarnation.stop_by_manager and result not in ("oom-kill",):
                self._end_cleanly(incarnation, time)
                return
            if result == "oom-kill":
                self._add_evidence(
                    incarnation, CrashCause.HOST_OOM, EvidenceKind.REAL, "", line, time
                )
            elif result in ("timeout", "watchdog"):
                self._add_evidence(
                    incarnation, CrashCause.TIMEOUT, EvidenceKind.REAL, "", line, time
                )
            elif result in ("signal", "core-dump"):
                self._add_evidence(
                    incarnation, CrashCause.KILLED, EvidenceKind.SIGNAL, "", line, time
                )
            self._end(incarnation, Outcome.CRASHED, time)
        elif event is SystemdEvent.OOM_KILLED:
            self._add_evidence(incarnation, CrashCause.HOST_OOM, EvidenceKind.REAL, "", line, time)
            if not incarnation.ended:
                incarnation.fatal_pending_at = time
        elif event is SystemdEvent.START_TIMED_OUT:
            self._add_evidence(incarnation, CrashCause.TIMEOUT, EvidenceKind.REAL, "", line, time)
            if not incarnation.ended:
                incarnation.fatal_pending_at = time

    def _on_exit(
        self, incarnation: _Incarnation, groups: Mapping[str, str | None], time: datetime | None
    ) -> None:
        code = groups.get("code") or ""
        status = _int(groups.get("status")) or 0
        name = groups.get("name") or ""
        if code == "exited" and status == 0:
            if incarnation.fatal_pending_at is not None and not incarnation.stop_requested:
                self._end(incarnation, Outcome.CRASHED, time)
            else:
                self._end_cleanly(incarnation, time)
            return
        if incarnation.stop_requested and (name in _STOP_SIGNALS or status in _STOP_STATUSES):
            self._end_cleanly(incarnation, time)
            return
        if code in ("killed", "dumped"):
            self._add_evidence(
                incarnation,
                CrashCause.KILLED,
                EvidenceKind.SIGNAL,
                "",
                f"main process {code}, signal {name or status}",
                time,
            )
        self._end(incarnation, Outcome.CRASHED, time)

    # --- vLLM events ---------------------------------------------------------------------

    def _on_marker(
        self, incarnation: _Incarnation, found: MarkerMatch, body: str, time: datetime | None
    ) -> None:
        marker, groups = found
        event = marker.event
        if not groups and marker.phase is incarnation.phase and event in _PLAIN_EVENTS:
            return  # a marker of the phase the incarnation is in (access lines, routes): no-op
        if groups:
            self._read_figures(incarnation, event, groups)
        if event is Event.ENGINE_INIT or event is Event.SERVER_CONFIG:
            tp_size = _TP_SIZE.search(body)
            if tp_size is not None and incarnation.tensor_parallel_size is None:
                incarnation.tensor_parallel_size = int(tp_size.group(1))
        if event is Event.FATAL or event is Event.PORT_CONFLICT:
            if incarnation.ended or incarnation.stop_requested:
                return
            if marker.cause is not None:
                cause = CrashCause(marker.cause)
                kind = (
                    EvidenceKind.NOISE
                    if event is Event.PORT_CONFLICT
                    else EvidenceKind.WRAPPER
                    if cause is CrashCause.WORKER_DIED
                    else EvidenceKind.REAL
                )
                self._add_evidence(incarnation, cause, kind, "", body, time)
            if event is Event.FATAL:
                if marker.terminal:
                    self._end(incarnation, Outcome.CRASHED, time)
                elif incarnation.fatal_pending_at is None:
                    incarnation.fatal_pending_at = time
            return
        if event is Event.PROCESS_STARTED:
            incarnation.has_banner = True
        if event is Event.SHUTDOWN:
            if not incarnation.ended:
                incarnation.stop_requested = True
                self._advance(incarnation, Phase.STOPPING, time)
            return
        if event is Event.SHUTDOWN_COMPLETE:
            if incarnation.fatal_pending_at is not None:
                self._end(incarnation, Outcome.CRASHED, time)
            else:
                self._end_cleanly(incarnation, time)
            return
        phase = marker.phase
        if phase is not None:
            self._advance(incarnation, phase, time)

    @staticmethod
    def _read_figures(
        incarnation: _Incarnation, event: Event, groups: Mapping[str, str | None]
    ) -> None:
        version = groups.get("ver")
        if version and incarnation.vllm_version is None:
            incarnation.vllm_version = version[:64]
        model = groups.get("model")
        if (
            model
            and not incarnation.model_from_engine
            and (incarnation.model is None or event is Event.ENGINE_INIT)
        ):
            incarnation.model = model[:256]
            # the engine's report wins, once: later ones must not churn the info series
            incarnation.model_from_engine = event is Event.ENGINE_INIT
        for group, attribute, convert in _FIGURES.get(event, ()):
            value = convert(groups.get(group))
            if value is not None:
                setattr(incarnation, attribute, value)
        if event is Event.WEIGHTS_PROGRESS:
            loaded, total = _int(groups.get("n")), _int(groups.get("total"))
            if total:
                incarnation.shards_total = total
                incarnation.shards_loaded = max(loaded or 0, incarnation.shards_loaded or 0)
        elif event is Event.MODEL_LOADED:
            seconds = _float(groups.get("s"))
            if seconds is not None and incarnation.weights_load_seconds is None:
                incarnation.weights_load_seconds = seconds
            if incarnation.shards_total:
                incarnation.shards_loaded = incarnation.shards_total

    def _on_exception(
        self,
        incarnation: _Incarnation,
        exception: ExceptionEvent,
        line_kind: LineKind,
        role: Role | None,
        time: datetime | None,
    ) -> None:
        if is_request_error(exception.exception, exception.message, exception.context):
            return
        if exception.context is not None and self._benign.matches(exception.context):
            return
        if incarnation.stop_requested and not incarnation.ended:
            return  # errors while shutting down (EngineDeadError on SIGTERM) are not crashes
        if incarnation.ended and incarnation.settled:
            return
        if incarnation.outcome is Outcome.STOPPED:
            return
        cause, kind = classify_exception(exception.exception, exception.message)
        self._add_evidence(incarnation, cause, kind, exception.exception, exception.message, time)
        if incarnation.ended:
            return
        context = exception.context or ""
        uncaught = not exception.logged and not context.startswith(_NOT_PROCESS_DEATH)
        if incarnation.phase in _STARTUP:
            if uncaught and exception.in_traceback and line_kind is LineKind.RAW:
                self._end(incarnation, Outcome.CRASHED, time)
            elif incarnation.fatal_pending_at is None and not context.startswith(
                _NOT_PROCESS_DEATH
            ):
                incarnation.fatal_pending_at = time  # a thread's exception kills no process
        elif (
            uncaught
            and role in (None, Role.API_SERVER, Role.MAIN)
            and incarnation.fatal_pending_at is None
        ):
            incarnation.fatal_pending_at = time

    def _on_uncaught_traceback(
        self, incarnation: _Incarnation, pid: int | None, time: datetime | None
    ) -> None:
        """A raw traceback began: a process is dying of an uncaught exception."""
        if incarnation.ended or incarnation.stop_requested:
            return
        context = self._tracebacks.context_of(pid) or ""
        if context.startswith(_NOT_PROCESS_DEATH) or incarnation.phase not in _STARTUP:
            return
        if incarnation.fatal_pending_at is None:
            incarnation.fatal_pending_at = time

    def _add_evidence(
        self,
        incarnation: _Incarnation,
        cause: CrashCause,
        kind: EvidenceKind,
        exception: str,
        message: str,
        time: datetime | None,
    ) -> None:
        self._seq += 1
        evidence = incarnation.evidence
        evidence.append(Evidence(cause, kind, exception, message[:1000], time, self._seq))
        if len(evidence) > _MAX_EVIDENCE:
            # keep the best candidates (most direct kind, earliest), whatever their arrival order
            evidence.remove(max(evidence, key=_evidence_rank))

    # --- phase moves ---------------------------------------------------------------------

    def _advance(self, incarnation: _Incarnation, phase: Phase, time: datetime | None) -> None:
        if incarnation.ended or not is_forward(incarnation.phase, phase):
            return
        previous = incarnation.timeline[-1]
        time = _not_before(time, previous.entered_at)
        if (
            previous.phase in _STARTUP
            and phase in _STARTUP | {Phase.READY}
            and previous.entered_at is not None
            and time is not None
        ):
            self._phase_durations[previous.phase] = max(
                0.0, (time - previous.entered_at).total_seconds()
            )
        incarnation.phase = phase
        incarnation.timeline.append(PhaseEntry(phase, time))
        if (phase in _STARTUP or phase is Phase.READY) and (
            _PHASE_RANK[phase] > _PHASE_RANK[incarnation.furthest]
        ):
            incarnation.furthest = phase
        if phase is Phase.READY:
            incarnation.outcome = Outcome.READY
            incarnation.fatal_pending_at = None  # it became ready after the error: survived
            if incarnation.started_at is not None and time is not None:
                self._startup_duration = max(0.0, (time - incarnation.started_at).total_seconds())

    def _end_cleanly(self, incarnation: _Incarnation, time: datetime | None) -> None:
        if incarnation.fatal_pending_at is not None and not incarnation.stop_requested:
            self._end(incarnation, Outcome.CRASHED, time)
        else:
            self._end(incarnation, Outcome.STOPPED, time)

    def _end(self, incarnation: _Incarnation, outcome: Outcome, time: datetime | None) -> None:
        if time is not None and (incarnation.settle_from is None or time > incarnation.settle_from):
            incarnation.settle_from = time  # each end signal restarts the settle window
        if incarnation.ended:
            if (
                outcome is Outcome.CRASHED
                and incarnation.outcome is Outcome.STOPPED
                and not incarnation.stop_by_manager
            ):
                # systemd says the process failed after its log looked like a clean stop
                incarnation.outcome = Outcome.CRASHED
                incarnation.timeline[-1] = PhaseEntry(Phase.CRASHED, incarnation.ended_at)
                incarnation.counted = self.counting
                self._unsettled.append(incarnation)
            return
        incarnation.crash_phase = incarnation.phase
        time = _not_before(time, incarnation.timeline[-1].entered_at)
        incarnation.ended_at = time
        incarnation.outcome = outcome
        final = Phase.CRASHED if outcome is Outcome.CRASHED else Phase.STOPPED
        incarnation.phase = final
        incarnation.timeline.append(PhaseEntry(final, time))
        if outcome is Outcome.CRASHED:
            incarnation.counted = self.counting
            self._unsettled.append(incarnation)

    def _settle_due(self, now: datetime | None) -> None:
        if not self._unsettled or now is None:
            return
        for incarnation in list(self._unsettled):
            ended = incarnation.settle_from or incarnation.ended_at
            wait = self._settle
            if incarnation.id is not None and not incarnation.confirmed:
                # journal mode: the exit record is still to come, and late lines with it
                wait = self._settle * _UNCONFIRMED_GRACE
            if ended is None or now - ended >= wait:
                self._settle_one(incarnation)
                self._unsettled.remove(incarnation)

    def _settle_one(self, incarnation: _Incarnation) -> None:
        if incarnation.settled:
            return
        incarnation.settled = True
        if incarnation.counted:
            self.crashes_total[self._crash_info(incarnation).cause] += 1

    def unsettled_since(self) -> datetime | None:
        """When the earliest crash that will count but is not counted yet ended (UTC)."""
        ends = [i.ended_at for i in self._unsettled if i.counted and i.ended_at is not None]
        return min(ends) if ends else None

    def current_pids(self) -> tuple[int, ...]:
        """PIDs the journal showed for the current incarnation (GPU attribution fallback)."""
        current = self._current()
        return tuple(current.pids) if current is not None and not current.ended else ()

    # --- output --------------------------------------------------------------------------

    def _crash_info(self, incarnation: _Incarnation) -> CrashInfo:
        evidence: Iterable[Evidence] = incarnation.evidence
        ended = incarnation.ended_at
        if incarnation.furthest is Phase.READY and ended is not None:
            evidence = [
                item
                for item in incarnation.evidence
                if item.at is None or ended - item.at <= _POST_READY_CAUSE_WINDOW
            ]
        root = choose_root_cause(evidence)
        phase = incarnation.crash_phase or incarnation.phase
        if root is None:
            return CrashInfo(CrashCause.UNKNOWN, "", "", phase, ended, incarnation.id)
        return CrashInfo(root.cause, root.exception, root.message, phase, ended, incarnation.id)

    def _snapshot_incarnation(self, incarnation: _Incarnation) -> IncarnationSnapshot:
        tp = incarnation.tensor_parallel_size
        if tp is None and incarnation.max_rank:
            tp = incarnation.max_rank + 1  # a lower bound: the highest rank that logged
        return IncarnationSnapshot(
            id=incarnation.id,
            started_at=incarnation.started_at,
            ended_at=incarnation.ended_at,
            phases=tuple(incarnation.timeline),
            phase=incarnation.phase,
            furthest_phase=incarnation.furthest,
            outcome=incarnation.outcome,
            crash=(
                self._crash_info(incarnation) if incarnation.outcome is Outcome.CRASHED else None
            ),
            pids=tuple(incarnation.pids),
            benign_errors=incarnation.benign_errors,
            records=incarnation.records,
            last_record_at=incarnation.last_record_at,
            last_progress_at=incarnation.last_progress_at,
            vllm_version=incarnation.vllm_version,
            model=incarnation.model,
            tensor_parallel_size=tp,
            progress=Progress(
                weights_shards_loaded=incarnation.shards_loaded,
                weights_shards_total=incarnation.shards_total,
                model_weights_bytes=incarnation.model_weights_bytes,
                weights_load_seconds=incarnation.weights_load_seconds,
                compile_seconds=incarnation.compile_seconds,
                kv_cache_bytes=incarnation.kv_cache_bytes,
                kv_cache_tokens=incarnation.kv_cache_tokens,
                cuda_graph_bytes=incarnation.cuda_graph_bytes,
                cuda_graph_capture_seconds=incarnation.cuda_graph_capture_seconds,
                engine_init_seconds=incarnation.engine_init_seconds,
            ),
        )

    def snapshot(self, now: datetime | None = None) -> UnitSnapshot:
        """Freeze what is known now (a pure query: settling happens in ``feed``/``advance``).

        ``now`` is accepted for symmetry with the Monitor's calls and is not used. Until
        ``feed``, ``advance`` or ``finish`` change something, the same snapshot is returned
        (a fleet's Monitor asks for all of a host's units when one of them moves).
        """
        if self._snapshot is not None:
            return self._snapshot
        incarnations = tuple(self._snapshot_incarnation(item) for item in self._incarnations)
        last_crash = next(
            (item.crash for item in reversed(incarnations) if item.crash is not None),
            self._last_evicted_crash,
        )
        self._snapshot = UnitSnapshot(
            host=self.host,
            unit=self.unit,
            incarnations=incarnations,
            starts_total=self.starts_total,
            crashes_total=MappingProxyType(dict(self.crashes_total)),
            records_by_level=MappingProxyType(dict(self.records_by_level)),
            benign_errors_total=self.benign_errors_total,
            duplicates_total=self.duplicates_total,
            last_crash=last_crash,
            phase_durations=MappingProxyType(dict(self._phase_durations)),
            startup_duration_seconds=self._startup_duration,
        )
        return self._snapshot


class TrackerSet:
    """Route records to one ``UnitTracker`` per (host, unit), creating trackers on demand.

    Args:
        units: unit names or globs to keep (``vllm*``); empty keeps every unit.
        default_unit: the unit of records that name none (plain text).
        factory: builds a tracker for (unit, host).
    """

    def __init__(
        self,
        units: Iterable[str] = (),
        *,
        default_unit: str = "vllm",
        factory: Callable[[str, str | None], UnitTracker] | None = None,
    ) -> None:
        self._patterns = tuple(units)
        self._default_unit = default_unit
        self._factory = factory or UnitTracker
        self._trackers: dict[tuple[str | None, str], UnitTracker] = {}
        self._wanted: dict[str, bool] = {}  # wants() by unit name (bounded below)
        self._counting = True
        self.unrouted_total = 0

    @property
    def counting(self) -> bool:
        """``UnitTracker.counting`` of every tracker, present and future."""
        return self._counting

    @counting.setter
    def counting(self, value: bool) -> None:
        if value == self._counting:
            return
        self._counting = value
        for tracker in self._trackers.values():
            tracker.counting = value

    def wants(self, unit: str) -> bool:
        """True when ``unit`` matches the configured names or globs."""
        if not self._patterns:
            return True
        wanted = self._wanted.get(unit)
        if wanted is None:
            if len(self._wanted) >= _MAX_CACHED_UNITS:
                self._wanted.clear()
            wanted = self._wanted[unit] = any(fnmatchcase(unit, p) for p in self._patterns)
        return wanted

    def feed(self, record: Record) -> bool:
        """Apply a record to its unit's tracker; False if filtered out or a duplicate."""
        return self.feed_many((record,)) == 1

    def feed_many(self, records: Iterable[Record]) -> int:
        """Apply records in order (as ``feed`` each); return how many were applied.

        Consecutive records of one unit go to its tracker as one run (``feed_many``).
        """
        applied = 0
        run: list[Record] = []
        run_key: tuple[str | None, str] | None = None
        run_tracker: UnitTracker | None = None
        for record in records:
            unit = record.unit or self._default_unit
            if self._patterns and not self.wants(unit):
                self.unrouted_total += 1
                continue
            key = (record.host, unit)
            if key != run_key:
                if run_tracker is not None and run:
                    applied += run_tracker.feed_many(run)
                    run = []
                run_key = key
                run_tracker = self._tracker(key)
            run.append(record)
        if run_tracker is not None and run:
            applied += run_tracker.feed_many(run)
        return applied

    def _tracker(self, key: tuple[str | None, str]) -> UnitTracker:
        tracker = self._trackers.get(key)
        if tracker is None:
            host, unit = key
            tracker = self._trackers[key] = self._factory(unit, host)
            tracker.counting = self._counting
        return tracker

    def __iter__(self) -> Iterator[UnitTracker]:
        return iter(list(self._trackers.values()))

    def adopt(self, trackers: Iterable[UnitTracker]) -> None:
        """Take over existing trackers (a config reload keeps the state of kept units)."""
        for tracker in trackers:
            tracker.counting = self._counting
            self._trackers[(tracker.host, tracker.unit)] = tracker

    def remove(self, host: str | None, unit: str) -> None:
        """Forget a unit (removed from config)."""
        self._trackers.pop((host, unit), None)
