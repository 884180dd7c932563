"""``UnitTracker``: records of one unit → incarnations, phases and crash causes (core: pure).

The tracker is the one place that decides. It reads each record line by line
(``vllm_line.parse_line``), lets the per-process ``TracebackAssembler`` take traceback lines,
matches the rest against the ``markers`` catalog and systemd's messages, and applies what they
say to the right incarnation. The rules themselves live in one module each:

* ``incarnations`` — which incarnation a record belongs to (invocation id, PID ownership,
  banners and ``Started`` beginning new ones);
* ``incarnation`` — one incarnation's state, its forward-only phase moves and its figures;
* ``crash`` — crash evidence, ending, and settling into ``crashes_total``;
* ``line_clock`` and ``seen_cursors`` — the time of a line, and records already applied.

Crashes: the incarnation ends ``crashed`` on systemd's non-zero exit or failure, an uncaught
(raw) traceback during startup, or a failure line after which the process exits. A logged
traceback during startup makes a crash *pending*: confirmed by the exit, by a new incarnation,
or at the end of a replay (``finish``).

Deterministic: the same records in the same order always give the same snapshot. Records whose
journal cursor was already applied are ignored (``feed`` returns False), so re-reading after a
reconnect is harmless.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Final

from vllm_sentinel.engine.catalog.announcements import is_announcement
from vllm_sentinel.engine.catalog.causes import (
    BenignMatcher,
    CrashCause,
    Evidence,
    EvidenceKind,
    bare_raise_cause,
    classify_exception,
    classify_frames,
    is_engine_dead,
    is_request_error,
    is_stop_request,
)
from vllm_sentinel.engine.catalog.failure_lines import Effect, FailureMatch, classify_failure_line
from vllm_sentinel.engine.catalog.markers import (
    PHASE_END_EVENTS,
    Event,
    MarkerMatch,
    MarkerMatcher,
    SystemdEvent,
    crash_reporter,
    match_systemd,
)
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Outcome, Phase
from vllm_sentinel.engine.counters import UnitCounters
from vllm_sentinel.engine.crash import CrashBook
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.decode.vllm_line import LineAnatomy, LineKind, Role, parse_line
from vllm_sentinel.engine.health import api_url_from_args
from vllm_sentinel.engine.incarnation import (
    BENIGN_LINE_CHARS,
    BENIGN_LINES_KEPT,
    RECENT_EVENTS_KEPT,
    Incarnation,
    parse_int,
    read_figures,
    read_path_version,
    read_progress_bar,
)
from vllm_sentinel.engine.line_clock import LineClock
from vllm_sentinel.engine.routing import Incarnations
from vllm_sentinel.engine.runtime_modes import (
    MODE_EVENTS,
    NOT_PROGRESS,
    READY_TIMEOUT_NEEDLE,
    apply_mode_event,
    read_ready_timeout,
    watchdog_stalled,
)
from vllm_sentinel.engine.seen_cursors import SeenCursors
from vllm_sentinel.engine.snapshot import PhaseEntry, RuntimeModes, UnitSnapshot
from vllm_sentinel.engine.tracebacks import ExceptionEvent, TracebackAssembler
from vllm_sentinel.engine.unit_selection import selects

__all__ = [
    "BENIGN_LINES_KEPT",
    "RATE_LIMITED_REASON",
    "RECENT_EVENTS_KEPT",
    "TrackerSet",
    "UnitTracker",
]

_STARTUP: Final = frozenset(STARTUP_PHASES)
_TP_SIZE: Final = re.compile(r"tensor_parallel_size[=':\s]+(\d{1,4})")
_ERROR_LEVELS: Final = frozenset({"ERROR", "CRITICAL"})
_MAX_CACHED_UNITS: Final = 1024
_MAX_TRACE_OWNERS: Final = 256
_MAX_CACHED_CAUSES: Final = 512  # classified ERROR lines / innermost frames kept per tracker
_MAX_MANAGER_UNITS: Final = 16
# The unit a line of systemd's names: "vllm3.service: Main process exited, …" (the unit's own
# messages, systemd src/core/unit.c log_unit_*), "Started vllm3.service - vLLM." (job results
# since systemd 250 name the unit before its description)
_MANAGER_UNIT: Final = re.compile(
    r"(?P<unit>[\w@:.\\-]{1,200}\.(?:service|scope)): "
    r"|(?:Started|Starting|Stopping|Stopped|Failed to start) (?P<started>[\w@:.\\-]{1,200}"
    r"\.(?:service|scope)) - "
)
_NON_DEFAULT_ARGS: Final = "non-default args: {"  # vLLM 0.9+: the whole dict of non-default args
# V0's single-device executors (vllm/executor/gpu_executor.py … 0.3–0.6) size the KV cache
# themselves; the multi-device ones log it from distributed_gpu_executor.py and the like
_SINGLE_DEVICE_EXECUTOR: Final = re.compile(
    r"(?:gpu|cpu|xpu|hpu|habana|neuron|openvino)_executor\.py:"
)
_JSON: Final = LineKind.JSON
_VLLM: Final = LineKind.VLLM
_RAW: Final = LineKind.RAW
_PROCESS_STARTED: Final = Event.PROCESS_STARTED
# a line of these events is no progress (heartbeats, engine stats, modes' idle lines)
_NO_PROGRESS: Final = frozenset({Event.HEARTBEAT, *NOT_PROGRESS})
# Marker events whose only effect is a phase move (no figures, no special handling).
_PLAIN_EVENTS: Final = frozenset(Event) - {
    Event.ENGINE_INIT,
    Event.SERVER_CONFIG,
    Event.FATAL,
    Event.PORT_CONFLICT,
    Event.PROCESS_STARTED,
    Event.SHUTDOWN,
    Event.SHUTDOWN_COMPLETE,
    *MODE_EVENTS,  # runtime_modes: sleep, weight cache, startup plan, watchdog (vllm2026)
}
_BAR_EVENTS: Final = frozenset({Event.WEIGHTS_PROGRESS, Event.GRAPH_CAPTURE_PROGRESS})  # tqdm bars
_MANAGER_IDENTS: Final = frozenset({"systemd", "kernel"})
_LOW_LEVELS: Final[Mapping[str, str]] = MappingProxyType(
    {level: level.lower() for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
)
_NOT_PROCESS_DEATH: Final = ("Exception ignored in", "Exception in thread")
_STOP_SIGNALS: Final = frozenset({"TERM", "INT", "KILL", "15", "2", "9"})
_STOP_STATUSES: Final = frozenset({0, 130, 137, 143})
_END_EVENTS: Final = frozenset(
    {
        SystemdEvent.MAIN_PROCESS_EXITED,
        SystemdEvent.UNIT_FAILED,
        SystemdEvent.UNIT_STOPPED,
        SystemdEvent.UNIT_DEACTIVATED,
    }
)


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
        not_after: no such timestamp is put after this time (``LineClock``); ``None``: no bound.
        settle_seconds: log-time delay before a crash is counted with its cause.
        traceback_hold_seconds: how long (after its end) a crash may wait for the rest of a
            traceback its process is still printing.
        settle_while_feeding: settle crashes as log time passes (the daemon); False settles
            only in ``advance`` and ``finish`` (``replay``: nothing settles before the end of
            its input, however long the gap to the next line).

    Attributes:
        counting: while False, records rebuild incarnations, phases and the last crash but
            count into no counter (starts, crashes, records by level, benign errors): the
            daemon sets it for history it counted before (records up to its saved cursor,
            whose counters it restored, ``restore``) and for the backfill of its first start.
            A crash counts when its end is seen while counting (or when it was carried).
        rate_limited_total: messages of the unit journald dropped (the ``N`` of its
            ``Suppressed N messages`` entries read while counting; not saved across restarts).
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
        not_after: datetime | None = None,
        settle_seconds: float = 30.0,
        traceback_hold_seconds: float = 300.0,
        settle_while_feeding: bool = True,
    ) -> None:
        self.unit = unit
        self.host = host
        self._matcher = matcher or MarkerMatcher()
        self._benign = benign or BenignMatcher()
        self._crashes = CrashBook(settle_seconds, traceback_hold_seconds)
        self._settle_while_feeding = settle_while_feeding
        # PID → the incarnation whose traceback that process is printing (the traceback's
        # rest belongs there, and holds its crash unsettled while it is open)
        self._trace_owner: dict[int | None, Incarnation] = {}
        # PID → its last ERROR line that was neither a marker nor part of a traceback, and the
        # stand-in evidence made of it when a logged traceback followed (see _stand_in)
        self._last_error: dict[int | None, str] = {}
        self._stand_ins: dict[int | None, tuple[Incarnation, Evidence]] = {}
        # PID → the evidence its open traceback's innermost frames gave (``_on_frames``), and
        # the frame and source line it was read from: the exception line replaces it; and
        # whether its being cut is a process's death while serving (``_frames_cut``)
        self._frame_stand_ins: dict[
            int | None,
            tuple[Incarnation, Evidence | None, tuple[str, str | None], Phase | None, bool],
        ] = {}
        # PID → its last ERROR line kept as evidence (``_on_error_line``), which a stand-in
        # replaces (``_stand_in``)
        self._error_lines: dict[int | None, tuple[str, Evidence]] = {}
        # what an ERROR line's words, and a cut traceback's innermost frames, were classified
        # as: a crash loop prints the same lines start after start (bounded, per tracker)
        self._line_causes: dict[str, tuple[CrashCause, EvidenceKind]] = {}
        self._frame_causes: dict[tuple[str, ...], tuple[CrashCause, str, str]] = {}
        self._incs = Incarnations(self._crashes, max_incarnations)
        self._tracebacks = TracebackAssembler()
        self._clock = LineClock(reference_year, not_after=not_after)
        self._seen = SeenCursors()
        self._latest_time: datetime | None = None  # log time that settles crashes (feed_many)
        self._previous_time: datetime | None = None
        self._jump = timedelta(seconds=max(traceback_hold_seconds, 10 * settle_seconds))
        self._line_level = "none"  # the level of the last line read (a record's: its first)
        self._counting = True
        self.records_by_level: Counter[str] = Counter()
        self._level_names = dict(_LOW_LEVELS)  # a plain dict: read on every line
        self.benign_errors_total = 0
        self.duplicates_total = 0
        self.rate_limited_total = 0
        self.recognized_lines = 0  # lines that looked like vLLM's or systemd's (replay checks)
        # units systemd's own lines name ("vllm3.service: Main process exited…"): plain text
        # names none itself, so replay can name the unit after them (bounded, in order seen)
        self.manager_units: dict[str, None] = {}
        self._phase_durations: dict[Phase, float] = {}
        self._startup_duration: float | None = None
        self._snapshot: UnitSnapshot | None = None  # the last snapshot, while nothing changed
        self._ready_timeout: float | None = None  # VLLM_ENGINE_READY_TIMEOUT_S as last shown

    @property
    def counting(self) -> bool:
        """Whether starts and crashes seen now count (see the class docstring)."""
        return self._counting

    @counting.setter
    def counting(self, value: bool) -> None:
        self._counting = value
        self._crashes.counting = value
        self._incs.counting = value

    @property
    def last_record_at(self) -> datetime | None:
        """The log time of the last record fed (journal order; ``None`` before any)."""
        return self._previous_time

    @property
    def starts_total(self) -> int:
        """Incarnations started while counting."""
        return self._incs.starts_total

    @property
    def crashes_total(self) -> Counter[CrashCause]:
        """Settled, counted crashes by cause."""
        return self._crashes.crashes_total

    # --- input ---------------------------------------------------------------------------

    def feed(self, record: Record) -> bool:
        """Apply one record; return False when it was already applied (same cursor)."""
        return self.feed_many((record,)) == 1

    def feed_many(self, records: Iterable[Record]) -> int:
        """Apply records in order (as ``feed`` each); return how many were not duplicates."""
        self._snapshot = None
        applied = 0
        clock = self._clock
        crashes = self._crashes
        # per level, counted here and added once (a Counter's item update is a slow call)
        levels: dict[str, int] = {}
        try:
            for record in records:
                cursor = record.cursor
                if cursor is not None and self._seen.seen(cursor):
                    self.duplicates_total += 1
                    continue
                applied += 1
                if record.dropped is not None:  # journald's word: N of the unit's lines lost
                    if self._counting:
                        self.rate_limited_total += record.dropped
                    continue
                time = record.realtime
                if time is not None:
                    clock.observe(time)
                    # the log time crashes settle by: this record's, but a jump ahead of the
                    # one before by more than the traceback hold counts only once a second
                    # record agrees (one line dated in the future, by a skewed writer or a
                    # forged stamp, cannot settle crashes; later lines bring the time back)
                    previous = self._previous_time
                    self._previous_time = time
                    if previous is None or time <= previous or time - previous <= self._jump:
                        self._latest_time = time
                    else:
                        self._latest_time = previous
                message = record.message
                if record.from_manager or record.syslog_identifier in _MANAGER_IDENTS:
                    for line in message.split("\n") if "\n" in message else (message,):
                        self._feed_manager(record, line, time or clock.last_time)
                elif "\n" in message:
                    # one journal entry is one record, whatever its MESSAGE holds: its level is
                    # its first line's
                    lines = message.split("\n")
                    self._feed_line(record, lines[0], time)
                    level = self._line_level
                    for line in lines[1:]:
                        self._feed_line(record, line, time)
                    if self._counting:
                        levels[level] = levels.get(level, 0) + 1
                else:
                    self._feed_line(record, message, time)
                    if self._counting:
                        level = self._line_level
                        levels[level] = levels.get(level, 0) + 1
                if crashes.unsettled and self._settle_while_feeding:
                    crashes.settle_due(self._latest_time, self._printing_traceback)
        finally:
            counts = self.records_by_level
            for level, count in levels.items():
                counts[level] += count
        return applied

    def advance(self, now: datetime) -> bool:
        """Let wall-clock time pass: settle crashes that ended ``settle_seconds`` before ``now``.

        The Monitor calls this on its tick, but not while a host's journal is being
        backfilled: old records would otherwise look settled before their late lines arrive.

        Returns:
            True when something settled: the snapshot may have changed (the Monitor rebuilds
            only the snapshots of trackers that changed).
        """
        if not self._crashes.settle_due(now, self._printing_traceback):
            return False
        self._snapshot = None
        return True

    def finish(self) -> None:
        """End of input (replay): confirm pending crashes, end stops in progress, settle all."""
        self._snapshot = None
        for pid in list(self._frame_stand_ins):
            self._frames_cut(pid)  # a traceback open at the end of input was cut there
        for incarnation in self._incs.items:
            if incarnation.ended:
                continue
            if incarnation.fatal_pending:
                self._crashes.end(incarnation, Outcome.CRASHED, incarnation.last_record_at)
            elif incarnation.stop_requested and incarnation.phase is Phase.STOPPING:
                # asked to stop, and nothing after: the input ends with the stop
                self._crashes.end(incarnation, Outcome.STOPPED, incarnation.last_record_at)
        self._crashes.settle_all()

    def unsettled_since(self) -> datetime | None:
        """When the earliest crash that will count but is not counted yet ended (UTC)."""
        return self._crashes.unsettled_since()

    # --- counters kept across restarts of the daemon ------------------------------------------

    def counters(self) -> UnitCounters:
        """The counters as they are now, with the crashes that will count but are not counted
        yet (what a restarted daemon goes on from)."""
        return UnitCounters(
            starts=self._incs.starts_total,
            crashes=MappingProxyType(dict(self._crashes.crashes_total)),
            records=MappingProxyType(dict(self.records_by_level)),
            benign_errors=self.benign_errors_total,
            carried=self._crashes.carried(),
        )

    def open_since(self) -> datetime | None:
        """When the oldest incarnation whose outcome may still change began: running, or
        crashed and not settled yet (a restarted daemon reads the journal from there, so it
        rebuilds them whole: phases, evidence and causes, not just what follows its cursor)."""
        starts = [
            incarnation.started_at
            for incarnation in self._incs.items
            if incarnation.started_at is not None
            and not (
                incarnation.outcome is Outcome.STOPPED
                or (incarnation.outcome is Outcome.CRASHED and incarnation.settled)
            )
        ]
        return min(starts) if starts else None

    def restore(self, counters: UnitCounters) -> None:
        """Go on from counters a previous run saved (before any record is fed); its carried
        crashes count when their end is read again, even as history (``CrashBook.carry``)."""
        self._snapshot = None
        self._incs.starts_total = counters.starts
        self._crashes.crashes_total = Counter(counters.crashes)
        self.records_by_level = Counter(counters.records)
        self.benign_errors_total = counters.benign_errors
        self._crashes.carry(counters.carried)

    def settle_carried(self) -> int:
        """Count the restored carried crashes that were not read again (the end of the
        daemon's backfill); return how many."""
        counted = self._crashes.settle_carried()
        if counted:
            self._snapshot = None
        return counted

    def _printing_traceback(self, incarnation: Incarnation) -> bool:
        """True while a process of ``incarnation`` is inside a traceback (no exception yet)."""
        is_open = self._tracebacks.is_open
        return any(
            owner is incarnation and is_open(pid) for pid, owner in self._trace_owner.items()
        )

    def current_pids(self) -> tuple[int, ...]:
        """PIDs the journal showed for the current incarnation (GPU attribution fallback)."""
        current = self._incs.current()
        return tuple(current.pids) if current is not None and not current.ended else ()

    def _feed_line(
        self,
        record: Record,
        line: str,
        record_time: datetime | None,
        anatomy: LineAnatomy | None = None,
    ) -> None:
        parsed = parse_line(line) if anatomy is None else anatomy
        body, kind, level, stamp, source, role, rank, line_pid, _ = parsed
        if kind is _JSON and anatomy is None and "\n" in body:
            # vLLM's JSON formatter puts a whole traceback in one record (``exc_info``): each
            # of its lines is read as a line of that process with the record's header.
            for part in body.split("\n"):
                self._feed_line(record, part, record_time, parsed._replace(body=part))
            return
        if record_time is not None:
            time: datetime | None = record_time
        elif stamp is None:
            time = self._clock.last_time  # ``line_time(None)`` without the call (hot path)
        else:
            time = self._clock.line_time(stamp)
        pid = line_pid or record.pid
        has_header = kind is _VLLM or kind is _JSON
        consumed, exception, started = self._tracebacks.feed(pid, body, level, has_header)
        found = None if consumed else self._matcher.match(body, kind)
        event = found.marker.event if found is not None else None
        # _attribute, inlined for the common cases: a known invocation id, or none and the
        # current incarnation.
        incs = self._incs
        incarnations = incs.items
        invocation_id = record.invocation_id
        if invocation_id is not None:
            incarnation = incs.by_id.get(invocation_id) or incs.attribute(record, pid, time)
        elif incarnations and (
            pid is None or pid in incarnations[-1].pids or pid not in incs.pid_owner
        ):
            incarnation = incarnations[-1]
        else:
            incarnation = incs.attribute(record, pid, time)
        stream = record.stream
        if stream is not None and incs.stream_owner.get(stream) is not incarnation:
            incarnation = incs.on_stream(stream, incarnation)  # a left-over process writes
            # on its start's stream
        if (
            event is _PROCESS_STARTED
            and invocation_id is None
            and incarnation is incs.current()
            and (
                incarnation.has_banner
                or incarnation.ended
                or incarnation.fatal_pending
                or incarnation.phase is not Phase.STARTING
            )
        ):
            incarnation = self._incs.start(None, time)
            self._incs.release_pids(incarnation)
            self._tracebacks.reset()  # the old processes' tracebacks end with them (open ones
            # go on: a dying process may still be printing one)
        trace_owner = self._trace_owner
        if started:
            if len(trace_owner) >= _MAX_TRACE_OWNERS and pid not in trace_owner:
                del trace_owner[next(iter(trace_owner))]
            trace_owner[pid] = incarnation
        elif consumed:
            owner = trace_owner.get(pid)
            if owner is not None and owner is not incarnation and invocation_id is None:
                incarnation = owner  # the rest of a traceback goes where it began
        elif trace_owner and pid in trace_owner:
            del trace_owner[pid]
        self._line_level = self._level_names.get(level, "none") if level else "none"
        if kind is not _RAW or consumed or found is not None or line_pid is not None:
            self.recognized_lines += 1  # vLLM's shape: a header, prefix, marker or traceback
        if incarnation.started_at is None and time is not None:
            incarnation.started_at = time  # the first line with a time (excerpts start anywhere)
            if incarnation.timeline[0].entered_at is None:
                incarnation.timeline[0] = PhaseEntry(Phase.STARTING, time)
        incarnation.records += 1
        incarnation.last_record_at = time
        if pid is not None and pid not in incarnation.pids:
            incs.claim_pid(incarnation, pid)
        if rank is not None and (incarnation.max_rank is None or rank > incarnation.max_rank):
            incarnation.max_rank = rank
        if event not in _NO_PROGRESS:
            incarnation.last_progress_at = time
        if READY_TIMEOUT_NEEDLE in body:
            # the unit's environment: later starts keep it until a line says otherwise; a line
            # after an incarnation ended (a launcher's trace before the next banner) is the
            # next start's, not the ended one's
            shown = read_ready_timeout(RuntimeModes(), body).ready_timeout_seconds
            if shown is not None:
                self._ready_timeout = shown
                if not incarnation.ended:
                    incarnation.modes = replace(incarnation.modes, ready_timeout_seconds=shown)
        if started:
            if not has_header:
                self._on_uncaught_traceback(incarnation, pid, time)
            elif level in _ERROR_LEVELS:
                if self._last_error:
                    self._stand_in(incarnation, pid, kind, role, time)
                if source is not None:
                    self._on_reported_traceback(incarnation, pid, source)
        if consumed:
            read_path_version(incarnation, body)  # a version line may be before the excerpt
            if exception is None and body.startswith(" "):
                self._on_frames(incarnation, pid, time)
        if exception is not None:
            if self._frame_stand_ins:
                self._drop_frames(pid)
        elif (
            self._frame_stand_ins
            and pid in self._frame_stand_ins
            and (started or not self._tracebacks.is_open(pid))
        ):
            self._frames_cut(pid)  # it ended, or a new one began, without an exception line
        if exception is not None:
            if self._stand_ins and not exception.chained:
                self._drop_stand_in(pid)
            self._on_exception(incarnation, exception, kind, role, time, pid)
        elif found is not None:
            marker, groups = found
            if groups or marker.phase is not incarnation.phase or event not in _PLAIN_EVENTS:
                self._on_marker(incarnation, found, body, time, source, role, pid)
            # else a marker of the phase the incarnation is in (access lines, routes): no-op
        elif not consumed and kind is LineKind.RAW and not incarnation.ended:
            failure = classify_failure_line(body)
            if failure is not None:
                self._on_failure_line(incarnation, failure, time)
            elif incarnation.phase in _STARTUP:
                self._on_bare_raise(incarnation, body, time)
        if level in _ERROR_LEVELS and not consumed:
            if self._benign.matches(body):
                incarnation.benign_errors += 1
                if self._counting:
                    self.benign_errors_total += 1
                if len(incarnation.benign_lines) < BENIGN_LINES_KEPT:
                    incarnation.benign_lines.append(body[:BENIGN_LINE_CHARS])
            elif found is None and exception is None:
                if len(self._last_error) >= _MAX_TRACE_OWNERS and pid not in self._last_error:
                    del self._last_error[next(iter(self._last_error))]
                self._last_error[pid] = body
                self._on_error_line(incarnation, body, pid, time)

    def _stand_in(
        self,
        incarnation: Incarnation,
        pid: int | None,
        kind: LineKind,
        role: Role | None,
        time: datetime | None,
    ) -> None:
        """A logged traceback began right after an ERROR line of the same process.

        ``logger.exception(e)`` (vLLM's V0 engine, plugins) logs ``str(e)`` and then the
        traceback, so that line is the exception's message: it stands in for the exception
        line, which excerpts and dying processes often cut off, until that line arrives.
        """
        message = self._last_error.pop(pid, None)
        if message is None or message != self._tracebacks.context_of(pid):
            return
        if is_announcement(message):
            return  # it says that something failed, not what
        if message[:1].isspace():
            return  # an indented line (a source line, ``^^^^`` marks): a cut traceback's inside
        kept = self._error_lines.pop(pid, None)
        if kept is not None and kept[0] == message and kept[1] in incarnation.evidence:
            incarnation.evidence.remove(kept[1])  # it becomes the stand-in below
        event = ExceptionEvent("", message, None, True, False, True)
        evidence = self._on_exception(incarnation, event, kind, role, time, pid)
        if evidence is not None:
            self._stand_ins[pid] = (incarnation, evidence)

    def _on_error_line(
        self, incarnation: Incarnation, body: str, pid: int | None, time: datetime | None
    ) -> None:
        """An ERROR line of vLLM's that is no marker and no traceback's line: when its words
        name a failure (``causes.classify_exception``), it is evidence of the crash.

        ``logger.error("Failed to create unquantized linear weights: %s", e)`` (linear.py)
        states the OOM before the traceback that a paste often cuts off. A line that only
        announces a failure (``announcements``), a request's error and a line the same
        process outlives (``CrashBook.survived``) name no cause.
        """
        if incarnation.ended or incarnation.stop_requested or is_announcement(body):
            return
        known = self._line_causes.get(body)
        if known is None:
            known = classify_exception("", body)
            if len(self._line_causes) >= _MAX_CACHED_CAUSES:
                self._line_causes.clear()
            self._line_causes[body] = known
        cause, kind = known
        if cause is CrashCause.UNKNOWN or kind is not EvidenceKind.REAL:
            return
        if is_request_error("", body, None):
            return
        evidence = self._crashes.add_evidence(
            incarnation, cause, kind, "", body, time, pid=pid, survivable=True
        )
        if len(self._error_lines) >= _MAX_TRACE_OWNERS and pid not in self._error_lines:
            del self._error_lines[next(iter(self._error_lines))]
        self._error_lines[pid] = (body, evidence)

    def _on_frames(self, incarnation: Incarnation, pid: int | None, time: datetime | None) -> None:
        """A frame (or its source line) of an open traceback was read: until its exception
        line arrives, its innermost frames are evidence of what failed
        (``causes.classify_frames``, kind ``FRAMES``: below any real exception line, above
        wrappers). A paste, a search index or a dying process often ends a traceback there.
        """
        cut = self._tracebacks.cut(pid)
        if cut is None:
            return
        key = (cut.frames[-1], cut.source)
        held = self._frame_stand_ins.get(pid)
        if held is not None and held[2] == key:
            return
        self._drop_frames(pid)
        if incarnation.stop_requested or incarnation.outcome is Outcome.STOPPED:
            return
        frames_key = (*cut.frames, cut.source or "")
        classified = self._frame_causes.get(frames_key)
        if classified is None:
            classified = classify_frames(cut.frames, cut.source)
            if len(self._frame_causes) >= _MAX_CACHED_CAUSES:
                self._frame_causes.clear()
            self._frame_causes[frames_key] = classified
        cause, exception, message = classified
        evidence = None
        death = cut.entry and incarnation.phase not in _STARTUP  # a process dying while serving
        if death:
            context = self._tracebacks.context_of(pid)
            death = context is None or not (
                is_request_error("", "", context) or self._benign.matches(context)
            )
        if cause is not CrashCause.UNKNOWN:
            # a request's traceback or a benign one is no evidence (asked only once the frames
            # name a cause: most frames name none, and this runs on every frame line)
            context = self._tracebacks.context_of(pid)
            if context is not None and (
                is_request_error("", "", context) or self._benign.matches(context)
            ):
                return
            shown = (
                f"{message} … (traceback cut before its exception line)"
                if message
                else f"traceback cut before its exception line; innermost frame: "
                f"{cut.frames[-1].strip()}"
            )
            evidence = self._crashes.add_evidence(
                incarnation,
                cause,
                EvidenceKind.FRAMES,
                exception,
                shown,
                time,
                pid=pid,
                survivable=True,
            )
        if len(self._frame_stand_ins) >= _MAX_TRACE_OWNERS and pid not in self._frame_stand_ins:
            del self._frame_stand_ins[next(iter(self._frame_stand_ins))]
        self._frame_stand_ins[pid] = (incarnation, evidence, key, cut.phase, death)

    def _frames_cut(self, pid: int | None) -> None:
        """Stream ``pid``'s traceback ended without its exception line (another line of it
        came, or the input ended): its stand-in stays, and the phase its frames name is the
        phase it was raised in (never before: the exception line may say a stop). An uncaught
        one through a process's entry frame after startup (``CutTraceback.entry``) is that
        process dying while serving: a crash pending, unproven (a stop may still show)."""
        held = self._frame_stand_ins.pop(pid, None)
        if held is None:
            return
        incarnation, _, _, phase, death = held
        if phase is not None:
            self._raised_in(incarnation, phase, incarnation.last_record_at)
        if death and not (incarnation.ended or incarnation.stop_requested):
            # an uncaught traceback through a process's entry frame, after ready, cut before
            # its exception line: that process died while serving (cause: the frames', if any)
            incarnation.mark_fatal(proven=False)

    def _drop_frames(self, pid: int | None) -> None:
        """The exception line arrived (or deeper frames): the frames' stand-in is no longer
        evidence."""
        held = self._frame_stand_ins.pop(pid, None)
        if held is not None:
            incarnation, evidence, _, _, _ = held
            if evidence is not None and evidence in incarnation.evidence:
                incarnation.evidence.remove(evidence)

    def _drop_stand_in(self, pid: int | None) -> None:
        """The real exception line arrived: its message's stand-in is no longer evidence."""
        owner = self._stand_ins.pop(pid, None)
        if owner is not None:
            incarnation, evidence = owner
            if evidence in incarnation.evidence:
                incarnation.evidence.remove(evidence)

    # --- systemd -------------------------------------------------------------------------

    def _feed_manager(self, record: Record, line: str, time: datetime | None) -> None:
        matched = match_systemd(line, record.message_id)
        if matched is None:
            return
        self.recognized_lines += 1
        named = _MANAGER_UNIT.match(line)
        if named is not None and len(self.manager_units) < _MAX_MANAGER_UNITS:
            self.manager_units[named.group("unit") or named.group("started") or ""] = None
        event, groups = matched
        if event is SystemdEvent.BOOT:
            current = self._incs.current()
            if current is not None:
                self._incs.supersede(current)
            return
        if event in (SystemdEvent.UNIT_STARTING, SystemdEvent.UNIT_STARTED):
            if record.invocation_id is not None:
                incarnation = self._incs.attribute(record, None, time, False)
            else:
                current = self._incs.current()
                incarnation = (
                    current
                    if current is not None and current.pristine
                    else self._incs.start(None, time)
                )
            incarnation.start_seen = True
            if incarnation.started_at is None or (
                time is not None and incarnation.pristine and time < incarnation.started_at
            ):
                incarnation.started_at = time
                incarnation.timeline[0] = PhaseEntry(Phase.STARTING, time)
            return
        target = (
            self._incs.attribute(record, None, time)
            if record.invocation_id
            else self._incs.current()
        )
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
            self._crashes.end_cleanly(incarnation, time)
        elif event is SystemdEvent.MAIN_PROCESS_EXITED:
            self._on_exit(incarnation, groups, time)
        elif event is SystemdEvent.UNIT_FAILED:
            result = groups.get("result") or ""
            if incarnation.stop_by_manager and result not in ("oom-kill",):
                self._crashes.end_cleanly(incarnation, time)
                return
            if result == "oom-kill":
                self._crashes.add_evidence(
                    incarnation, CrashCause.HOST_OOM, EvidenceKind.REAL, "", line, time
                )
            elif result in ("timeout", "watchdog"):
                self._crashes.add_evidence(
                    incarnation, CrashCause.TIMEOUT, EvidenceKind.REAL, "", line, time
                )
            elif result in ("signal", "core-dump"):
                self._crashes.add_evidence(
                    incarnation, CrashCause.KILLED, EvidenceKind.SIGNAL, "", line, time
                )
            self._crashes.end(incarnation, Outcome.CRASHED, time)
        elif event is SystemdEvent.OOM_KILLED:
            self._crashes.add_evidence(
                incarnation, CrashCause.HOST_OOM, EvidenceKind.REAL, "", line, time
            )
            incarnation.mark_fatal()
        elif event is SystemdEvent.START_TIMED_OUT:
            self._crashes.add_evidence(
                incarnation, CrashCause.TIMEOUT, EvidenceKind.REAL, "", line, time
            )
            incarnation.mark_fatal()

    def _on_exit(
        self, incarnation: Incarnation, groups: Mapping[str, str | None], time: datetime | None
    ) -> None:
        code = groups.get("code") or ""
        status = parse_int(groups.get("status")) or 0
        name = groups.get("name") or ""
        if code == "exited" and status == 0:
            if incarnation.fatal_pending and not incarnation.stop_requested:
                self._crashes.end(incarnation, Outcome.CRASHED, time)
            else:
                self._crashes.end_cleanly(incarnation, time)
            return
        if incarnation.stop_requested and (name in _STOP_SIGNALS or status in _STOP_STATUSES):
            self._crashes.end_cleanly(incarnation, time)
            return
        if code in ("killed", "dumped"):
            self._crashes.add_evidence(
                incarnation,
                CrashCause.KILLED,
                EvidenceKind.SIGNAL,
                "",
                f"main process {code}, signal {name or status}",
                time,
            )
        self._crashes.end(incarnation, Outcome.CRASHED, time)

    # --- vLLM events ---------------------------------------------------------------------

    def _on_marker(
        self,
        incarnation: Incarnation,
        found: MarkerMatch,
        body: str,
        time: datetime | None,
        source: str | None = None,
        role: Role | None = None,
        pid: int | None = None,
    ) -> None:
        marker, groups = found
        event = marker.event
        if not groups and marker.phase is incarnation.phase and event in _PLAIN_EVENTS:
            return  # a marker of the phase the incarnation is in (access lines, routes): no-op
        if groups:
            read_figures(incarnation, event, groups)
            if event in _BAR_EVENTS and marker.phase is not None:
                read_progress_bar(incarnation, event, marker.phase, groups, time)
        ends = PHASE_END_EVENTS.get(event)
        if ends is not None and marker.phase is ends:
            self._advance(incarnation, ends, time)  # an excerpt may start with the end line
            incarnation.end_phase(ends, time)
        if (
            event is Event.ENGINE_INIT or event is Event.SERVER_CONFIG
        ) and incarnation.tensor_parallel_size is None:
            tp_size = _TP_SIZE.search(body)
            if tp_size is not None:
                incarnation.tensor_parallel_size = int(tp_size.group(1))
            elif body.startswith(_NON_DEFAULT_ARGS) and body.rstrip().endswith("}"):
                incarnation.tensor_parallel_size = 1  # every non-default arg is listed: default
        elif (
            event is Event.KV_CACHE_SIZED
            and source is not None
            and incarnation.tensor_parallel_size is None
            and _SINGLE_DEVICE_EXECUTOR.match(source) is not None
        ):
            incarnation.tensor_parallel_size = 1
        if event is Event.SERVER_CONFIG and incarnation.api_url is None:
            incarnation.api_url = api_url_from_args(body)
        if event is Event.FATAL or event is Event.PORT_CONFLICT:
            if incarnation.ended or incarnation.stop_requested:
                return
            if marker.cause is not None:
                cause = CrashCause(marker.cause)
                # a port hint is a consequence; a line that points at its traceback (a worker
                # died, vLLM's advice before it re-raises) is a wrapper (``causes``)
                kind = (
                    EvidenceKind.NOISE
                    if event is Event.PORT_CONFLICT
                    else EvidenceKind.WRAPPER
                    if cause is CrashCause.WORKER_DIED
                    else classify_exception("", body)[1]
                )
                self._crashes.add_evidence(incarnation, cause, kind, "", body, time)
            else:
                # a failure line that carries its exception's words (V0's "Exception in worker
                # … while processing method …: CUDA out of memory …"): they name the cause
                said, kind = classify_exception("", body)
                if said is not CrashCause.UNKNOWN:
                    self._crashes.add_evidence(incarnation, said, kind, "", body, time)
            if event is Event.FATAL:
                if marker.terminal:
                    self._crashes.end(incarnation, Outcome.CRASHED, time)
                else:
                    incarnation.mark_fatal()
            return
        if event in MODE_EVENTS:
            self._on_mode(incarnation, found, time)
            return
        if event is Event.PROCESS_STARTED:
            incarnation.has_banner = True
            incarnation.start_seen = True
        if event is Event.SHUTDOWN:
            if role is Role.WORKER:
                return  # a worker leaves with its parent: a stop or a failure decides, not it
            if not incarnation.ended:
                incarnation.stop_requested = True
                self._advance(incarnation, Phase.STOPPING, time)
            return
        if event is Event.SHUTDOWN_COMPLETE:
            if incarnation.fatal_pending:
                self._crashes.end(incarnation, Outcome.CRASHED, time)
            else:
                self._crashes.end_cleanly(incarnation, time)
            return
        phase = marker.phase
        if phase is not None:
            before = incarnation.phase
            self._advance(incarnation, phase, time)
            if incarnation.phase is not before and incarnation.evidence:
                # the process went on to a later phase: what it printed before did not end it
                self._crashes.survived(incarnation, pid)

    def _on_mode(self, incarnation: Incarnation, found: MarkerMatch, time: datetime | None) -> None:
        """A line of sleep, weight cache, startup plan or watchdog (``runtime_modes``)."""
        marker, groups = found
        if incarnation.ended:
            return
        incarnation.modes = apply_mode_event(incarnation.modes, marker.event, groups, time)
        if marker.event is Event.WOKE_UP:
            if incarnation.modes.sleeping_since is None and incarnation.wake(time):
                self._snapshot = None
            return
        if marker.phase is not None:
            self._advance(incarnation, marker.phase, time)

    def _on_exception(
        self,
        incarnation: Incarnation,
        exception: ExceptionEvent,
        line_kind: LineKind,
        role: Role | None,
        time: datetime | None,
        pid: int | None = None,
    ) -> Evidence | None:
        """An exception line (or a stand-in): evidence, and a crash pending or ended.

        The phase its innermost vLLM frames name (``frames``), when later than the markers',
        is the phase it was raised in.

        Returns:
            The evidence kept, or ``None`` when the exception is not evidence (a request's
            error, a benign one, one while shutting down).
        """
        if exception.continued:
            self._replace_blank(incarnation, exception, pid)
        if is_request_error(exception.exception, exception.message, exception.context):
            return None
        if exception.context is not None and self._benign.matches(exception.context):
            return None
        if incarnation.stop_requested and not incarnation.ended:
            return None  # errors while shutting down (EngineDeadError on SIGTERM): no crash
        if incarnation.outcome is Outcome.STOPPED:
            return None
        if is_stop_request(exception.exception, exception.message):
            self._stop_requested(incarnation, time)
            return None
        cause, kind = classify_exception(exception.exception, exception.message, exception.frame)
        evidence = self._crashes.add_evidence(
            incarnation,
            cause,
            kind,
            exception.exception,
            exception.message,
            time,
            pid=pid,
            survivable=True,
        )
        if exception.exception and kind is EvidenceKind.REAL and cause is not CrashCause.UNKNOWN:
            self._crashes.supersede_lines(incarnation, evidence)
        if exception.phase is not None:
            self._raised_in(incarnation, exception.phase, time)
        if incarnation.ended:
            return evidence
        context = exception.context or ""
        uncaught = not exception.logged and not context.startswith(_NOT_PROCESS_DEATH)
        if incarnation.phase in _STARTUP:
            if uncaught and exception.in_traceback and line_kind is LineKind.RAW:
                self._crashes.end(incarnation, Outcome.CRASHED, time)
            elif not context.startswith(_NOT_PROCESS_DEATH):
                incarnation.mark_fatal()  # a thread's exception kills no process
        elif uncaught and role in (None, Role.API_SERVER, Role.MAIN):
            incarnation.mark_fatal()
        if is_engine_dead(exception.exception, exception.message):
            incarnation.mark_fatal(final=True)  # the server may answer on; nothing serves
        return evidence

    @staticmethod
    def _replace_blank(
        incarnation: Incarnation, exception: ExceptionEvent, pid: int | None
    ) -> None:
        """The message of an exception line that had none arrived on the lines after it
        (``ExceptionEvent.continued``): the evidence of that line, or of its message so far,
        gives way to the exception with its message."""
        evidence = incarnation.evidence
        for index in range(len(evidence) - 1, -1, -1):
            item = evidence[index]
            if (
                item.pid == pid
                and item.exception == exception.exception
                and exception.message.startswith(item.message)
            ):
                del evidence[index]
                return

    def _on_failure_line(
        self, incarnation: Incarnation, failure: FailureMatch, time: datetime | None
    ) -> None:
        """A line that is not vLLM's says a process failed (``failure_lines``)."""
        row = failure.row
        crashes = self._crashes
        if row.recognized:
            self.recognized_lines += 1
        if row.effect is Effect.STOP:
            self._stop_requested(incarnation, time)
            return
        if row.effect is Effect.ENDS and (
            failure.outcome is Outcome.STOPPED or incarnation.stop_requested
        ):
            crashes.end_cleanly(incarnation, time)  # a stop, or a kill that ends one
            return
        if incarnation.stop_requested:
            return  # what breaks while shutting down is not a crash
        crashes.add_evidence(
            incarnation,
            failure.cause,
            row.kind,
            "",
            failure.message,
            time,
            survivable=row.survivable,
        )
        if row.effect is Effect.ENDS:
            crashes.end(incarnation, Outcome.CRASHED, time)
        elif row.effect is Effect.FATAL:
            incarnation.mark_fatal()

    # --- issue 19, mechanism 3: a fatal message without its exception class ------------------

    def _on_bare_raise(self, incarnation: Incarnation, body: str, time: datetime | None) -> None:
        """A bare line during startup that only a ``raise`` in vLLM prints (the failure
        catalog's raise-only templates, ``causes.bare_raise_cause``): a paste that kept the
        message and lost its class and traceback. It is the failure that ends the start."""
        if incarnation.stop_requested:
            return
        cause = bare_raise_cause(body)
        if cause is None:
            return
        self._crashes.add_evidence(incarnation, cause, EvidenceKind.REAL, "", body, time)
        incarnation.mark_fatal()

    def _stop_requested(self, incarnation: Incarnation, time: datetime | None) -> None:
        """The process was asked to stop (a signal, Ctrl-C): what follows is no crash."""
        incarnation.clear_unproven_fatal()
        if not incarnation.ended and not incarnation.fatal_pending:
            incarnation.stop_requested = True
            self._advance(incarnation, Phase.STOPPING, time)

    def _on_uncaught_traceback(
        self, incarnation: Incarnation, pid: int | None, time: datetime | None
    ) -> None:
        """A raw traceback began: a process is dying of an uncaught exception."""
        if incarnation.ended or incarnation.stop_requested:
            return
        context = self._tracebacks.context_of(pid) or ""
        if context.startswith(_NOT_PROCESS_DEATH) or incarnation.phase not in _STARTUP:
            return
        incarnation.mark_fatal(proven=False)

    def _on_reported_traceback(
        self, incarnation: Incarnation, pid: int | None, source: str
    ) -> None:
        """A logged ERROR traceback began: from a crash reporter during startup, a process is
        dying (``markers.CRASH_REPORTERS``), even when its header and exception are cut off."""
        if incarnation.ended or incarnation.stop_requested or incarnation.phase not in _STARTUP:
            return
        reporter = crash_reporter(source)
        if reporter is None or reporter.survives(self._tracebacks.context_of(pid)):
            return
        incarnation.mark_fatal(proven=False)

    def _raised_in(self, incarnation: Incarnation, phase: Phase, time: datetime | None) -> None:
        """A traceback's frames say it was raised in startup phase ``phase``: the
        incarnation was there, if the markers had not said as much (``frames``)."""
        if phase not in _STARTUP:
            return
        if not incarnation.ended:
            if incarnation.phase in _STARTUP:
                self._advance(incarnation, phase, time)
            return
        incarnation.raised_in(phase)

    def _advance(self, incarnation: Incarnation, phase: Phase, time: datetime | None) -> None:
        """Move ``incarnation`` forward to ``phase``, timing the startup phase it leaves."""
        previous = incarnation.enter(phase, time)
        if previous is None:
            return
        entered = incarnation.timeline[-1].entered_at
        if (
            previous.phase in _STARTUP
            and (phase in _STARTUP or phase is Phase.READY)
            and previous.entered_at is not None
            and entered is not None
        ):
            self._phase_durations[previous.phase] = max(
                0.0, (entered - previous.entered_at).total_seconds()
            )
        if (
            phase is Phase.READY
            and previous.phase is not Phase.SLEEPING
            and incarnation.started_at is not None
            and entered is not None
        ):
            self._startup_duration = max(0.0, (entered - incarnation.started_at).total_seconds())

    # --- output --------------------------------------------------------------------------

    def snapshot(self, now: datetime | None = None) -> UnitSnapshot:
        """Freeze what is known now (a pure query: settling happens in ``feed``/``advance``).

        ``now`` is accepted for symmetry with the Monitor's calls and is not used. Until
        ``feed``, ``advance`` or ``finish`` change something, the same snapshot is returned
        (a fleet's Monitor asks for all of a host's units when one of them moves).
        """
        if self._snapshot is not None:
            return self._snapshot
        crashes = self._crashes
        incarnations = tuple(
            item.snapshot(crashes.crash_info(item) if item.outcome is Outcome.CRASHED else None)
            for item in self._incs.items
        )
        last_crash = next(
            (item.crash for item in reversed(incarnations) if item.crash is not None),
            crashes.last_evicted_crash,
        )
        self._snapshot = UnitSnapshot(
            host=self.host,
            unit=self.unit,
            incarnations=incarnations,
            starts_total=self.starts_total,
            crashes_total=MappingProxyType(dict(crashes.crashes_total)),
            records_by_level=MappingProxyType(dict(self.records_by_level)),
            counted_crashes=tuple(self._crashes.recent),
            benign_errors_total=self.benign_errors_total,
            duplicates_total=self.duplicates_total,
            last_crash=last_crash,
            phase_durations=MappingProxyType(dict(self._phase_durations)),
            startup_duration_seconds=self._startup_duration,
            recent_starts=tuple(self._incs.recent_starts),
            recent_crashes=tuple(crashes.recent_crashes),
            earlier=crashes.earlier(),
            ready_timeout_seconds=self._ready_timeout,
        )
        if incarnations and watchdog_stalled(incarnations[-1]):
            # vLLM's own watchdog dumped the stack and nothing moved since (runtime_modes)
            self._snapshot = replace(self._snapshot, stalled=True, stall_reason="vllm_watchdog")
        return self._snapshot


RATE_LIMITED_REASON: Final = "journald_rate_limited"
"""The ``records_skipped`` reason of messages journald dropped (its per-unit rate limit): the
``N`` of its ``Suppressed N messages from UNIT`` entries about a kept unit."""


class TrackerSet:
    """Route records to one ``UnitTracker`` per (host, unit), creating trackers on demand.

    journald's ``Suppressed N messages`` entry about a kept unit (``Record.dropped``) goes to
    that unit's tracker, which counts its ``N`` once (``UnitTracker.rate_limited_total``);
    ``rate_limited_total`` sums them for the host (it never goes down, even when a unit is
    removed) and ``rate_limited`` by unit.

    Args:
        units: unit names or globs to keep (``vllm*``); empty keeps every unit.
        default_unit: the unit of records that name none (plain text).
        factory: builds a tracker for (unit, host).

    One journal can hold several machines (a ``systemd-journal-remote`` directory read as one
    configured host): a unit is owned by the first machine (``Record.machine``) its records
    name; records of the same unit name from another machine go to their own tracker, unit
    ``MACHINE/UNIT`` (``/`` is in no unit name), so that two machines' incarnations never
    merge into one timeline (a false ``superseded`` crash). ``machine_units_total`` counts
    those trackers.
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
        self._owners: dict[tuple[str | None, str], str] = {}  # the machine owning each unit
        self._counting = True
        self.unrouted_total = 0
        self.rate_limited_total = 0  # journald's dropped messages of kept units, summed
        self.rate_limited: dict[str, int] = {}  # … by unit (the last _MAX_CACHED_UNITS units)
        self.machine_units_total = 0

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

    def passed_over(self, limit: int = 5) -> list[str]:
        """Up to ``limit`` unit names of records that no pattern selected, sorted (what a
        filter that matched nothing can name; from the bounded cache of ``wants``)."""
        return sorted(unit for unit, wanted in self._wanted.items() if not wanted)[:limit]

    def wants(self, unit: str) -> bool:
        """True when ``unit`` matches the configured names or globs."""
        if not self._patterns:
            return True
        wanted = self._wanted.get(unit)
        if wanted is None:
            if len(self._wanted) >= _MAX_CACHED_UNITS:
                self._wanted.clear()
            wanted = self._wanted[unit] = selects(self._patterns, unit)
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
        run_of: tuple[str | None, str | None, str] | None = None  # host, machine, unit
        for record in records:
            unit = record.unit or self._default_unit
            if run_of is not None and (record.host, record.machine, unit) == run_of:
                run.append(record)  # the run's unit, host and machine again (hot path)
                continue
            if self._patterns and not self.wants(unit):
                self.unrouted_total += 1
                continue
            key = (record.host, unit)
            machine = record.machine
            run_of = (record.host, machine, unit)
            if machine is not None:
                owner = self._owners.setdefault(key, machine)
                if owner != machine:
                    key = (record.host, f"{machine}/{unit}")
            if key != run_key:
                if run_tracker is not None and run:
                    applied += self._feed_run(run_tracker, run)
                    run = []
                run_key = key
                run_tracker = self._tracker(key)
            run.append(record)
        if run_tracker is not None and run:
            applied += self._feed_run(run_tracker, run)
        return applied

    def _feed_run(self, tracker: UnitTracker, run: list[Record]) -> int:
        before = tracker.rate_limited_total
        applied = tracker.feed_many(run)
        dropped = tracker.rate_limited_total - before
        if dropped:
            self.rate_limited_total += dropped  # never goes down: a forgotten unit's stay
            limited = self.rate_limited
            if tracker.unit not in limited and len(limited) >= _MAX_CACHED_UNITS:
                del limited[next(iter(limited))]
            limited[tracker.unit] = limited.get(tracker.unit, 0) + dropped
        return applied

    def _tracker(self, key: tuple[str | None, str]) -> UnitTracker:
        tracker = self._trackers.get(key)
        if tracker is None:
            host, unit = key
            tracker = self._trackers[key] = self._factory(unit, host)
            tracker.counting = self._counting
            if "/" in unit:
                self.machine_units_total += 1
        return tracker

    def __iter__(self) -> Iterator[UnitTracker]:
        return iter(list(self._trackers.values()))

    def restore(self, host: str | None, unit: str, counters: UnitCounters) -> bool:
        """Create the tracker of ``unit`` going on from saved counters (False: not wanted)."""
        if self._patterns and not self.wants(unit.rpartition("/")[2]):
            return False
        self._tracker((host, unit)).restore(counters)
        return True

    def adopt(self, trackers: Iterable[UnitTracker]) -> None:
        """Take over existing trackers (a config reload keeps the state of kept units)."""
        for tracker in trackers:
            tracker.counting = self._counting
            self._trackers[(tracker.host, tracker.unit)] = tracker

    def carry_counts(self, previous: TrackerSet) -> None:
        """Go on from the host-wide counts of the set this one replaces (a config reload)."""
        self.rate_limited_total = previous.rate_limited_total
        self.rate_limited = dict(previous.rate_limited)
        self.unrouted_total = previous.unrouted_total

    def remove(self, host: str | None, unit: str) -> None:
        """Forget a unit (removed from config)."""
        self._trackers.pop((host, unit), None)
        self._owners.pop((host, unit), None)
