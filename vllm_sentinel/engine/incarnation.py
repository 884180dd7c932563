"""One incarnation of a unit: its state, its phase moves and the figures it logged (core: pure).

An *incarnation* is one run of the unit's main process: a systemd invocation, or in a text log
the stretch between two version banners. ``Incarnation`` is the tracker's mutable record of it
(snapshots are frozen copies, see ``snapshot.IncarnationSnapshot``). Two rules live here:

* **Phases only move forward** (``phases.is_forward``), and so does the timeline's time: a line
  from the past enters its phase at the time of the timeline's last entry (``not_before``).
* **Figures** a marker line carries (shards loaded, GiB, seconds, tokens) are read into the
  incarnation's ``progress`` (the frozen ``snapshot.Progress`` its snapshots share, replaced
  on each change) by a table, ``FIGURES``, keyed by the marker's event; a tqdm bar's reading
  (items done, the remaining time it prints) by ``read_progress_bar``.

Ending an incarnation (``close``) is the phase side of a crash or a stop; deciding *that* it
crashed, and why, is ``crash.CrashBook``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Final

from vllm_sentinel.engine.catalog.causes import Evidence
from vllm_sentinel.engine.catalog.markers import Event
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Outcome, Phase, is_forward
from vllm_sentinel.engine.snapshot import (
    CrashInfo,
    IncarnationSnapshot,
    PhaseEntry,
    Progress,
    ProgressBar,
    RuntimeModes,
)

__all__ = [
    "BENIGN_LINES_KEPT",
    "BENIGN_LINE_CHARS",
    "FIGURES",
    "RECENT_EVENTS_KEPT",
    "Incarnation",
    "not_before",
    "parse_float",
    "parse_int",
    "parse_interval",
    "read_figures",
    "read_path_version",
    "read_progress_bar",
]

BENIGN_LINES_KEPT = 5
"""Benign ERROR lines kept per incarnation, so that ``replay`` can say what it discounted."""
BENIGN_LINE_CHARS = 300
RECENT_EVENTS_KEPT = 100
"""Start and crash times kept per unit (``UnitSnapshot.recent_starts``/``recent_crashes``)."""

_GIB: Final = 1 << 30
_STARTUP: Final = frozenset(STARTUP_PHASES)
_PHASE_RANK: Final[Mapping[Phase, int]] = MappingProxyType({p: i for i, p in enumerate(Phase)})


@dataclass(slots=True)
class Incarnation:
    """Mutable state of one incarnation; owned by one ``UnitTracker`` (snapshots are frozen).

    Attributes (the ones other modules read):
        serial: 1, 2, … in order of creation within the tracker.
        id: the systemd invocation id, or ``None`` in text logs.
        started_at, ended_at: log times (UTC).
        phase, furthest: the current phase and the furthest startup phase reached.
        timeline: every phase entered, in order.
        evidence: why it may have crashed (``causes.Evidence``), bounded.
        fatal_pending: a failure was seen that the process exit must confirm (log lines
            without any time included).
        stop_requested / stop_by_manager: a clean stop was asked (by vLLM's log, by systemd).
        fatal_phase: the phase it was in when that failure was seen (the phase it crashed in
            when a shutdown followed the failure).
        settled / counted / settle_from / confirmed: crash settling state
            (``crash.CrashBook``).
        pids: processes that logged for it (insertion-ordered, bounded by the tracker).
        progress: the figures read so far and the last tqdm bar (``snapshot.Progress``).
    """

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
    fatal_pending: bool = False
    fatal_unproven: bool = False  # pending only because a raw traceback began (no exception yet)
    fatal_final: bool = False  # the engine is dead: reaching ready (500s) does not undo it
    fatal_phase: Phase | None = None  # the phase it was in when the pending failure was seen
    stop_requested: bool = False
    stop_by_manager: bool = False
    settled: bool = False
    counted: bool = True  # the crash counts into crashes_total (not learnt from history)
    settle_from: datetime | None = None  # the latest end signal (exit, failure) seen
    confirmed: bool = False  # systemd (or a newer incarnation) confirmed the end
    has_banner: bool = False
    pids: dict[int, None] = field(default_factory=dict)
    benign_errors: int = 0
    benign_lines: list[str] = field(default_factory=list)  # the first BENIGN_LINES_KEPT
    records: int = 0
    last_record_at: datetime | None = None
    last_progress_at: datetime | None = None
    vllm_version: str | None = None
    model: str | None = None
    model_from_engine: bool = False
    tensor_parallel_size: int | None = None
    api_url: str | None = None  # where its API server listens (health.py)
    max_rank: int | None = None
    progress: Progress = field(default_factory=Progress)  # figures, last tqdm bar (replaced)
    start_seen: bool = False  # systemd's Starting/Started or vLLM's banner was read
    bar_origin: datetime | None = None  # when the last bar started, by tqdm's own clock
    phase_ended: tuple[Phase, datetime] | None = None  # a line said this phase ended then
    modes: RuntimeModes = field(default_factory=RuntimeModes)  # runtime_modes (vllm2026)

    @property
    def ended(self) -> bool:
        """True once it crashed or stopped."""
        return self.outcome in (Outcome.CRASHED, Outcome.STOPPED)

    @property
    def pristine(self) -> bool:
        """True while nothing was logged for it and it has not ended."""
        return self.records == 0 and not self.ended

    def enter(self, phase: Phase, time: datetime | None) -> PhaseEntry | None:
        """Move to ``phase`` at ``time`` if that is forward.

        Returns:
            The entry of the phase it left (so the caller can time it), or ``None`` when the
            move was refused (not forward, or the incarnation has ended).
        """
        if self.ended or not is_forward(self.phase, phase):
            return None
        previous = self.timeline[-1]
        ended = self.phase_ended
        if ended is not None:
            self.phase_ended = None
            if ended[0] is self.phase and (time is None or ended[1] < time):
                time = ended[1]  # the next phase began where a line said this one ended
        time = not_before(time, previous.entered_at)
        self.phase = phase
        self.timeline.append(PhaseEntry(phase, time))
        if (phase in _STARTUP or phase is Phase.READY) and (
            _PHASE_RANK[phase] > _PHASE_RANK[self.furthest]
        ):
            self.furthest = phase
        if phase is Phase.READY:
            self.outcome = Outcome.READY
            if not self.fatal_final:
                self.fatal_pending = False  # it became ready after the error: survived
                self.fatal_phase = None
        return previous

    def wake(self, time: datetime | None) -> bool:
        """Leave ``sleeping`` for ``ready`` at ``time`` (the one move back: a whole wake-up,
        ``runtime_modes``); False when it is not sleeping."""
        if self.ended or self.phase is not Phase.SLEEPING:
            return False
        self.phase = Phase.READY
        self.timeline.append(
            PhaseEntry(Phase.READY, not_before(time, self.timeline[-1].entered_at))
        )
        return True

    def mark_fatal(self, *, proven: bool = True, final: bool = False) -> None:
        """A failure was seen that the process's exit must confirm (the first one counts).

        ``proven=False``: only a raw traceback began; its exception line may still say the
        process was asked to stop (``KeyboardInterrupt``), which ``clear_unproven_fatal``
        undoes. ``final=True``: the engine is dead; a server that answers on (500s) is no
        recovery.
        """
        if self.ended:
            return
        if final:
            self.fatal_final = True
        if not self.fatal_pending:
            self.fatal_pending = True
            self.fatal_phase = self.phase
            self.fatal_unproven = not proven
        elif proven:
            self.fatal_unproven = False

    def clear_unproven_fatal(self) -> None:
        """The traceback that made a crash pending turned out to be a stop request."""
        if self.fatal_pending and self.fatal_unproven:
            self.fatal_pending = False
            self.fatal_phase = None
            self.fatal_unproven = False

    def close(self, outcome: Outcome, time: datetime | None) -> None:
        """End it (``CRASHED`` or ``STOPPED``) at ``time`` (never before its last phase).

        A process that failed and then shut down (``stopping``) crashed in the phase its
        failure was seen in.
        """
        self.crash_phase = self.phase
        if self.phase is Phase.STOPPING and self.fatal_phase is not None:
            self.crash_phase = self.fatal_phase
        time = not_before(time, self.timeline[-1].entered_at)
        self.ended_at = time
        self.outcome = outcome
        final = Phase.CRASHED if outcome is Outcome.CRASHED else Phase.STOPPED
        self.phase = final
        self.timeline.append(PhaseEntry(final, time))

    def end_phase(self, phase: Phase, time: datetime | None) -> None:
        """A line says ``phase`` ended at ``time`` (``markers.PHASE_ENDS``): the next phase
        entered is entered then (the latest such line of the phase counts: each TP rank
        prints its own)."""
        if time is not None and self.phase is phase and not self.ended:
            self.phase_ended = (phase, time)

    def raised_in(self, phase: Phase) -> None:
        """A late traceback of a crashed incarnation was raised in ``phase`` (its frames say
        so): it crashed there when that is later than the phase it was known to be in."""
        if self.outcome is not Outcome.CRASHED or self.crash_phase is None:
            return
        if phase in _STARTUP and _PHASE_RANK[phase] > _PHASE_RANK[self.crash_phase]:
            self.crash_phase = phase
            if _PHASE_RANK[phase] > _PHASE_RANK[self.furthest]:
                self.furthest = phase

    def reopen_as_crashed(self) -> None:
        """A clean stop turns out to be a failure (systemd's verdict came after the log's)."""
        self.outcome = Outcome.CRASHED
        self.timeline[-1] = PhaseEntry(Phase.CRASHED, self.ended_at)

    def snapshot(self, crash: CrashInfo | None) -> IncarnationSnapshot:
        """Freeze it, with ``crash`` (its root cause, when it crashed)."""
        tp = self.tensor_parallel_size
        if tp is None and self.max_rank:
            tp = self.max_rank + 1  # a lower bound: the highest rank that logged
        return IncarnationSnapshot(
            id=self.id,
            started_at=self.started_at,
            ended_at=self.ended_at,
            phases=tuple(self.timeline),
            phase=self.phase,
            furthest_phase=self.furthest,
            outcome=self.outcome,
            crash=crash,
            pids=tuple(self.pids),
            benign_errors=self.benign_errors,
            benign_lines=tuple(self.benign_lines),
            records=self.records,
            last_record_at=self.last_record_at,
            last_progress_at=self.last_progress_at,
            vllm_version=self.vllm_version,
            model=self.model,
            tensor_parallel_size=tp,
            api_url=self.api_url,
            progress=self.progress,
            start_seen=self.start_seen,
            phase_ended_at=(
                self.phase_ended[1]
                if self.phase_ended is not None and self.phase_ended[0] is self.phase
                else None
            ),
            modes=self.modes,
        )


def not_before(time: datetime | None, floor: datetime | None) -> datetime | None:
    """``time``, or ``floor`` when it is earlier: a timeline never goes back.

    Log lines are not always in time order (threads, processes, a log pasted twice, the old
    incarnation's last line taken from the new process's first): a phase entered, or an end,
    at an earlier time than the timeline's last entry is placed at that entry's time.
    """
    if time is not None and floor is not None and time < floor:
        return floor
    return time


def parse_float(text: str | None) -> float | None:
    """``float(text)``, or ``None`` for ``None`` or a malformed number."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def parse_int(text: str | None) -> int | None:
    """``int(text)`` with thousands separators allowed, or ``None``."""
    try:
        return int(text.replace(",", "")) if text is not None else None
    except ValueError:
        return None


_MAX_INTERVAL_SECONDS: Final = 10**8  # about three years: longer is not a startup's bar


def parse_interval(text: str | None) -> float | None:
    """tqdm's ``MM:SS`` or ``H:MM:SS`` as seconds, or ``None`` (``?``, malformed, absurd)."""
    if not text or len(text) > 16:
        return None
    seconds = 0
    for part in text.split(":"):
        if not part.isdigit():
            return None
        seconds = seconds * 60 + int(part)
    return float(seconds) if seconds <= _MAX_INTERVAL_SECONDS else None


def _gib_bytes(text: str | None) -> int | None:
    value = parse_float(text)
    return int(value * _GIB) if value is not None else None


FIGURES: Mapping[Event, tuple[tuple[str, str, Callable[[str | None], float | int | None]], ...]]
FIGURES = MappingProxyType(
    {  # event → (named group of the marker, ``snapshot.Progress`` field, conversion)
        Event.WEIGHTS_LOADED: (("s", "weights_load_seconds", parse_float),),
        Event.MODEL_LOADED: (("gib", "model_weights_bytes", _gib_bytes),),
        Event.COMPILE_FINISHED: (("s", "compile_seconds", parse_float),),
        Event.KV_CACHE_MEMORY: (("gib", "kv_cache_bytes", _gib_bytes),),
        Event.KV_CACHE_SIZED: (("tokens", "kv_cache_tokens", parse_int),),
        Event.GRAPH_CAPTURE_FINISHED: (
            ("gib", "cuda_graph_bytes", _gib_bytes),
            ("s", "cuda_graph_capture_seconds", parse_float),
        ),
        Event.ENGINE_READY: (("s", "engine_init_seconds", parse_float),),
    }
)
"""The figures a marker line carries: where each named group goes, converted to base units."""


# The installed vLLM named in a traceback's lines (an excerpt often starts after the version
# line): an egg or .dist-info/.egg-info directory in a frame's path (setuptools names them
# ``NAME-VERSION-pyX.Y[-PLATFORM].egg``, ``NAME-VERSION.dist-info``), or the pin of the
# console script a pip/easy_install wrapper runs (``load_entry_point('vllm==VERSION', …)``).
# ``vllm_flash_attn-…``, ``vllm-ascend-…`` and a checkout named ``vllm-0.6.3/`` do not match.
_PACKAGE_VERSION: Final = re.compile(
    r"[/\\]vllm-(?P<ver>\d+\.\d+[\w.+]*?)(?:-py\d|\.dist-info[/\\]|\.egg-info[/\\])"
    r"|\bload_entry_point\(['\"]vllm==(?P<pin>\d+\.\d+[\w.+-]*)['\"]"
)


def read_path_version(incarnation: Incarnation, line: str) -> None:
    """Take the installed vLLM's version from a traceback line's path or entry-point pin,
    when no version line has given one (``_PACKAGE_VERSION``)."""
    if incarnation.vllm_version is not None or "vllm" not in line:
        return
    found = _PACKAGE_VERSION.search(line)
    if found is not None:
        incarnation.vllm_version = (found.group("ver") or found.group("pin"))[:64]


def read_figures(incarnation: Incarnation, event: Event, groups: Mapping[str, str | None]) -> None:
    """Copy the version, model and figures of a marker's named groups into ``incarnation``."""
    version = groups.get("ver")
    if version and incarnation.vllm_version is None:
        incarnation.vllm_version = version[:64]
    url = groups.get("url")
    if url:
        incarnation.api_url = url[:256]  # the API server's own start line wins
    model = groups.get("model")
    if (
        model
        and not incarnation.model_from_engine
        and (incarnation.model is None or event is Event.ENGINE_INIT)
    ):
        incarnation.model = model[:256]
        # the engine's report wins, once: later ones must not churn the info series
        incarnation.model_from_engine = event is Event.ENGINE_INIT
    figures: dict[str, Any] = {}
    for group, name, convert in FIGURES.get(event, ()):
        value = convert(groups.get(group))
        if value is not None:
            figures[name] = value
    if groups.get("world") == "1" and incarnation.tensor_parallel_size is None:
        incarnation.tensor_parallel_size = 1  # a world of one process: no tensor parallelism
    workers = parse_int(groups.get("workers"))
    if workers and (incarnation.max_rank is None or workers - 1 > incarnation.max_rank):
        incarnation.max_rank = workers - 1  # a lower bound of TP, like the ranks that logged
    progress = incarnation.progress
    if event is Event.WEIGHTS_PROGRESS:
        loaded, total = parse_int(groups.get("n")), parse_int(groups.get("total"))
        if total:
            figures["weights_shards_total"] = total
            figures["weights_shards_loaded"] = max(loaded or 0, progress.weights_shards_loaded or 0)
    elif event is Event.MODEL_LOADED:
        seconds = parse_float(groups.get("s"))
        if seconds is not None and progress.weights_load_seconds is None:
            figures["weights_load_seconds"] = seconds
        if progress.weights_shards_total:
            figures["weights_shards_loaded"] = progress.weights_shards_total
    if figures:
        incarnation.progress = _updated(progress, figures)


_FIELDS: Final = tuple(item.name for item in fields(Progress))


def _updated(progress: Progress, changes: Mapping[str, Any]) -> Progress:
    """``progress`` with ``changes`` (field name → value): ``dataclasses.replace`` without its
    per-call field introspection and keywords (a shard or graph bar line makes one)."""
    return Progress(
        *[changes[name] if name in changes else getattr(progress, name) for name in _FIELDS]
    )


def _shifted(time: datetime | None, seconds: float | None) -> datetime | None:
    """``time`` moved by ``seconds`` (``time`` itself without seconds; ``None`` past year 9999
    or before year 1)."""
    if time is None or seconds is None:
        return time if seconds is None else None
    try:
        return time + timedelta(seconds=seconds)
    except OverflowError:
        return None


def read_progress_bar(
    incarnation: Incarnation,
    event: Event,
    phase: Phase,
    groups: Mapping[str, str | None],
    time: datetime | None,
) -> None:
    """Keep the reading of a tqdm bar of ``phase`` (``n``/``total``, ``elapsed``, ``remaining``).

    A bar whose phase or total changes, or whose count goes back, is a new bar (prefetching,
    then loading; two CUDA graph bars). The reading is timed by the later of the line's time
    and tqdm's own clock (the bar's start plus its ``elapsed``): in a pasted log a bar's lines
    carry no time of their own, only that of the last header line before them. For the shard
    bar (``WEIGHTS_PROGRESS``), its first reading and when its count last grew are kept too,
    from which ``eta`` measures the shard rate.
    """
    done, total = parse_int(groups.get("n")), parse_int(groups.get("total"))
    elapsed = parse_interval(groups.get("elapsed"))
    previous = incarnation.progress.bar
    new_bar = (
        previous is None
        or previous.phase is not phase
        or previous.total != total
        or (previous.done or 0) > (done or 0)
    )
    if new_bar or incarnation.bar_origin is None:
        incarnation.bar_origin = _shifted(time, -elapsed if elapsed is not None else None)
    at = time
    by_tqdm = _shifted(incarnation.bar_origin, elapsed)
    if by_tqdm is not None and (at is None or by_tqdm > at):
        at = by_tqdm
    changes: dict[str, Any] = {
        "bar": ProgressBar(phase, at, done, total, parse_interval(groups.get("remaining")))
    }
    if event is Event.WEIGHTS_PROGRESS and done is not None and total:
        if new_bar:
            changes["weights_progress_first_at"] = at
            changes["weights_progress_first_loaded"] = done
            changes["weights_progress_at"] = at
        elif previous is not None and done > (previous.done or 0):
            changes["weights_progress_at"] = at
    incarnation.progress = _updated(incarnation.progress, changes)
