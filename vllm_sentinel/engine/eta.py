"""Startup history and the ETA to ready (core: pure, no clock, no I/O).

A unit's **startup history** is a bounded list of ``StartupRecord``: for each incarnation that
reached ``ready``, how long each startup phase took, with the model, vLLM version and tensor
parallel size it ran. The daemon keeps it across restarts (``history.HistoryStore``, an edge);
``replay`` builds it from the incarnations of its input. This module holds the arithmetic:

* ``startup_record`` turns an incarnation that reached ready into a record (only when its start
  was seen, so that its durations are whole); ``remember`` adds one to a history, once
  (dedupe by invocation id, else start time), keeping the newest ``HISTORY_SIZE``.
* ``comparable`` chooses the records to compare with: the same model's when there are any,
  else every model's on that unit; ``same_model`` only the same model's (the slow rule).
* ``usual_phase_seconds``: the median duration of a phase over the recent records that passed
  it.
* ``estimate_ready``: seconds until ready for an incarnation in a startup phase, from

  - **vLLM's own progress** for the rest of the current phase: the remaining time tqdm prints
    on its shard-loading and CUDA-graph bars (counted down from the line's time), or else the
    shard rate measured from the shard counts over time;
  - **history** for what vLLM does not say: for each recent start, the rest of the current
    phase (its duration there less the time already spent, never below 0) plus the phases after
    it; the median of these over the recent starts.

  The basis is ``both`` (vLLM's rest of this phase + history's phases to come), ``history``, or
  ``vllm`` (no history: the estimate is the end of the current bar, a lower bound). Without
  either, there is no estimate: never a made-up number.

  An estimate whose time has passed is **overdue**, never "ready in 0 s": a bar whose remaining
  time ran out with no newer line says nothing more about what is left (history, when there is
  some, is the basis then); when nothing else is left either (no history, or the last phase
  outlasting every recent start), the estimate has no ``eta_seconds`` and says how long ago it
  ran out (``overdue_seconds``).

Times are timezone-aware UTC; durations are float seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

from vllm_sentinel.engine.catalog.phases import PHASE_ORDER, STARTUP_PHASES, Outcome, Phase
from vllm_sentinel.engine.runtime_modes import DEFAULT_READY_TIMEOUT_SECONDS, ROLE_WEIGHT_CACHE
from vllm_sentinel.engine.snapshot import EtaBasis, IncarnationSnapshot, StartupRecord

__all__ = [
    "ETA_BASES",
    "HISTORY_SIZE",
    "RECENT_STARTS",
    "Estimate",
    "PhaseComparison",
    "StartupComparison",
    "comparable",
    "compare_startup",
    "estimate_ready",
    "log_remaining_seconds",
    "remember",
    "same_kind",
    "same_model",
    "startup_record",
    "usual_phase_seconds",
    "will_time_out",
]

HISTORY_SIZE = 20
"""Startup records kept per unit (the newest)."""

RECENT_STARTS = 5
"""How many of the newest comparable records the medians use."""

ETA_BASES: Mapping[EtaBasis, tuple[str, bool]] = MappingProxyType(
    {
        EtaBasis.VLLM: ("this phase's bar only", True),
        EtaBasis.HISTORY: ("from earlier starts", False),
        EtaBasis.BOTH: ("this phase's bar, then earlier starts", False),
    }
)
"""Per basis: what it rests on in words, and whether the estimate is a lower bound.

vLLM's bar alone (``vllm``) covers the rest of the current phase only, not the phases after it
(a load's bar ends, then compiling, profiling and CUDA graph capture follow): the unit will be
ready no sooner, and likely later. History covers every phase to come.
"""


def _median(values: Iterable[float]) -> float:
    """``statistics.median``, imported on first use: statistics pulls in random, fractions and
    decimal (4 ms), which a ``replay`` without history never needs."""
    import statistics

    return statistics.median(values)


_STARTUP = frozenset(STARTUP_PHASES)
_ENGINE_STARTUP = _STARTUP - {Phase.STARTING_API_SERVER}  # the engine ready timeout's span
_RANK: Mapping[Phase, int] = MappingProxyType({phase: i for i, phase in enumerate(PHASE_ORDER)})


@dataclass(frozen=True, slots=True)
class Estimate:
    """When an incarnation should be ready, and on what the estimate rests.

    Attributes:
        eta_seconds: seconds until ready, ``None`` when the estimate is overdue.
        expected_ready_at: when (in the past when overdue).
        basis: what the estimate rests on.
        overdue_seconds: how long ago the estimate ran out (``None`` unless overdue).
    """

    eta_seconds: float | None
    expected_ready_at: datetime
    basis: EtaBasis
    overdue_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class PhaseComparison:
    """One startup phase of a start against the usual (``usual_seconds`` None: no history)."""

    phase: Phase
    seconds: float
    usual_seconds: float | None


@dataclass(frozen=True, slots=True)
class StartupComparison:
    """A start that reached ready against the earlier ones.

    Attributes:
        startup_seconds: its start → ready.
        usual_startup_seconds: the median start → ready of the starts compared with.
        compared_starts: how many earlier starts the medians use (0: nothing to compare).
        same_model: True when those starts ran the same model.
        phases: its phases in order, each with the usual duration.
    """

    startup_seconds: float
    usual_startup_seconds: float | None
    compared_starts: int
    same_model: bool
    phases: tuple[PhaseComparison, ...]


def startup_record(incarnation: IncarnationSnapshot) -> StartupRecord | None:
    """The startup of ``incarnation``, or ``None``.

    ``None`` unless it reached ``ready`` with known times and its start was seen (systemd's
    ``Started`` or vLLM's banner): an incarnation read from its middle has no whole durations.
    """
    if not incarnation.start_seen or incarnation.started_at is None:
        return None
    durations: dict[Phase, float] = {}
    ready_at: datetime | None = None
    entries = incarnation.phases
    for index, entry in enumerate(entries):
        if entry.phase is Phase.READY:
            ready_at = entry.entered_at
            break
        if entry.phase not in _STARTUP or index + 1 >= len(entries):
            return None  # ended (stopping, crashed) before ready
        following = entries[index + 1].entered_at
        if entry.entered_at is None or following is None:
            return None
        durations[entry.phase] = max(0.0, (following - entry.entered_at).total_seconds())
    if ready_at is None:
        return None
    return StartupRecord(
        started_at=incarnation.started_at,
        ready_at=ready_at,
        phase_seconds=MappingProxyType(durations),
        invocation_id=incarnation.id,
        model=incarnation.model,
        vllm_version=incarnation.vllm_version,
        tensor_parallel_size=incarnation.tensor_parallel_size,
        startup_kind=incarnation.modes.startup_kind,
    )


def _is_same_start(a: StartupRecord, b: StartupRecord) -> bool:
    if a.invocation_id is not None and b.invocation_id is not None:
        return a.invocation_id == b.invocation_id
    return a.started_at == b.started_at


def remember(
    records: Sequence[StartupRecord], record: StartupRecord, limit: int = HISTORY_SIZE
) -> tuple[StartupRecord, ...] | None:
    """``records`` with ``record`` added in ready-time order, the newest ``limit`` kept.

    Returns ``None`` when nothing changes: the same start is there already (same invocation id;
    without ids, the same start time), so that a start seen again (a backfill after a restart)
    counts once; or it is older than the ``limit`` kept.
    """
    if limit <= 0 or any(_is_same_start(known, record) for known in records):
        return None
    merged = tuple(sorted((*records, record), key=lambda item: item.ready_at)[-limit:])
    return merged if record in merged else None


def same_kind(records: Iterable[StartupRecord], kind: str = "full") -> tuple[StartupRecord, ...]:
    """The records of starts that loaded the same way (``RuntimeModes.startup_kind``: a start
    that mapped its weights from a weight-cache daemon, or reused a startup plan, is not
    compared with full loads)."""
    return tuple(record for record in records if record.startup_kind == kind)


def same_model(
    records: Iterable[StartupRecord], model: str | None, kind: str = "full"
) -> tuple[StartupRecord, ...]:
    """The records of ``model`` that loaded the ``kind`` way (none when the model is not
    known)."""
    if model is None:
        return ()
    return tuple(record for record in same_kind(records, kind) if record.model == model)


def comparable(
    records: Sequence[StartupRecord], model: str | None, kind: str = "full"
) -> tuple[tuple[StartupRecord, ...], bool]:
    """The records to compare a start of ``model`` with, and whether they are the same model's.

    Only starts of the same ``kind`` (``same_kind``); of those, the same model's records when
    there are any; else every record of the unit (the model is unknown, or new on this unit).
    """
    own = same_model(records, model, kind)
    if own:
        return own, True
    return same_kind(records, kind), False


def usual_phase_seconds(
    records: Sequence[StartupRecord], phase: Phase, recent: int = RECENT_STARTS
) -> float | None:
    """The median seconds of ``phase`` over the newest ``recent`` records that passed it."""
    values = [record.phase_seconds[phase] for record in records if phase in record.phase_seconds]
    return float(_median(values[-recent:])) if values else None


def _after(record: StartupRecord, phase: Phase) -> float:
    """Seconds ``record`` spent in the startup phases that come after ``phase``."""
    rank = _RANK[phase]
    return sum(seconds for other, seconds in record.phase_seconds.items() if _RANK[other] > rank)


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def log_remaining_seconds(incarnation: IncarnationSnapshot, now: datetime) -> float | None:
    """Seconds left in the current phase by vLLM's own progress, or ``None``.

    The remaining time tqdm printed on the current phase's bar, less the time since that line;
    else, while loading weights, the shards left over the shard rate measured since the bar's
    first reading, less the time since the last shard. A complete bar says nothing more.
    Negative once that time has run out with no newer line: by how much it is overdue.
    """
    phase = incarnation.phase
    progress = incarnation.progress
    bar = progress.bar
    if bar is None or bar.phase is not phase or bar.is_complete or bar.at is None:
        return None
    if bar.remaining_seconds is not None:
        return bar.remaining_seconds - _seconds(now, bar.at)
    if phase is not Phase.LOADING_WEIGHTS:
        return None
    first_at, first, last_at = (
        progress.weights_progress_first_at,
        progress.weights_progress_first_loaded,
        progress.weights_progress_at,
    )
    if first_at is None or first is None or last_at is None:
        return None
    done, total = bar.done, bar.total
    if done is None or total is None or done <= first:
        return None
    span = _seconds(last_at, first_at)
    if span <= 0:
        return None
    rate = (done - first) / span
    return (total - done) / rate - _seconds(now, last_at)


def estimate_ready(
    incarnation: IncarnationSnapshot,
    records: Sequence[StartupRecord],
    now: datetime,
    recent: int = RECENT_STARTS,
) -> Estimate | None:
    """Estimate when ``incarnation`` will be ready, at ``now``; ``None`` without a basis.

    Args:
        incarnation: the unit's current incarnation.
        records: the unit's startup history (any models; ``comparable`` chooses), oldest first.
        now: the time of the estimate (UTC).
        recent: how many of the newest comparable records to use.

    Returns:
        The estimate, or ``None`` when the incarnation is not starting, or neither vLLM's
        progress nor history gives a basis. An estimate whose time has passed is overdue
        (``eta_seconds`` ``None``, ``overdue_seconds`` how long ago), never 0 s to go.
    """
    if incarnation.outcome is not Outcome.RUNNING or incarnation.phase not in _STARTUP:
        return None
    phase = incarnation.phase
    vllm_rest = log_remaining_seconds(incarnation, now)
    vllm_overdue: float | None = None
    if vllm_rest is not None and vllm_rest < 0:
        # the bar's time ran out and no newer line came: vLLM says nothing more about the rest
        vllm_overdue, vllm_rest = -vllm_rest, None
    chosen, _ = comparable(records, incarnation.model, incarnation.modes.startup_kind)
    chosen = chosen[-recent:] if recent > 0 else ()
    entered = incarnation.phase_entered_at
    overdue: float | None = None
    if chosen and vllm_rest is not None:
        seconds = vllm_rest + float(_median(_after(record, phase) for record in chosen))
        basis = EtaBasis.BOTH
    elif chosen and entered is not None:
        spent = max(0.0, _seconds(now, entered))
        beyond = 0.0  # seconds since a line said the current phase ended: the next ones'
        ended = incarnation.phase_ended_at
        if ended is not None and ended <= now:
            spent = max(0.0, _seconds(ended, entered))
            beyond = _seconds(now, ended)
        seconds = float(
            _median(
                max(0.0, record.phase_seconds.get(phase, 0.0) - spent)
                + max(0.0, _after(record, phase) - beyond)
                for record in chosen
            )
        )
        basis = EtaBasis.HISTORY
        if seconds <= 0:  # the last phase outlasted the recent starts: overdue by the median
            unclamped = _median(
                record.phase_seconds.get(phase, 0.0) - spent + _after(record, phase) - beyond
                for record in chosen
            )
            overdue = max(0.0, -float(unclamped))
    elif vllm_rest is not None:
        seconds, basis = vllm_rest, EtaBasis.VLLM
    elif vllm_overdue is not None:
        seconds, basis, overdue = 0.0, EtaBasis.VLLM, vllm_overdue
    else:
        return None
    try:
        if overdue is not None:
            return Estimate(None, now - timedelta(seconds=overdue), basis, overdue)
        return Estimate(seconds, now + timedelta(seconds=seconds), basis)
    except OverflowError:  # past year 9999: no time to show
        return None


def compare_startup(
    record: StartupRecord, earlier: Sequence[StartupRecord], recent: int = RECENT_STARTS
) -> StartupComparison:
    """Compare a start with the earlier ones (``comparable`` chooses which, ``recent`` newest)."""
    chosen, own = comparable(earlier, record.model, record.startup_kind)
    chosen = chosen[-recent:] if recent > 0 else ()
    phases = tuple(
        PhaseComparison(phase, seconds, usual_phase_seconds(chosen, phase, recent))
        for phase, seconds in sorted(record.phase_seconds.items(), key=lambda item: _RANK[item[0]])
    )
    usual = float(_median(item.startup_seconds for item in chosen)) if chosen else None
    return StartupComparison(
        record.startup_seconds, usual, len(chosen), own and bool(chosen), phases
    )


# --- the engine ready timeout (vllm2026) ----------------------------------------------------


def will_time_out(
    incarnation: IncarnationSnapshot,
    expected_ready_at: datetime | None,
    now: datetime,
    unit_timeout: float | None = None,
) -> tuple[bool, float, float | None]:
    """Whether the start will outlast vLLM's engine ready timeout, by its ETA.

    vLLM's front end waits ``VLLM_ENGINE_READY_TIMEOUT_S`` (600 s unless the incarnation's
    lines, or else the unit's earlier ones, show another value:
    ``runtime_modes.read_ready_timeout``) for its engine cores to report ready,
    then raises ``TimeoutError: Timed out waiting for engine core processes to start``
    (vllm/v1/engine/core_client.py, 0.17.1–0.33.0). The wait is counted here from the
    incarnation's start, a little early (the front end starts waiting a few seconds later).

    Args:
        incarnation: the unit's current incarnation.
        expected_ready_at: when the ETA says it will be ready (``None``: no estimate).
        now: the time of the verdict (UTC).
        unit_timeout: the timeout the unit's lines showed last (any incarnation), if any.

    Returns:
        (will time out, the timeout in seconds, seconds left before it runs out or ``None``
        when it does not apply: not starting, the engine already ready, a weight-cache
        daemon, no start time).
    """
    timeout = (
        incarnation.modes.ready_timeout_seconds or unit_timeout or DEFAULT_READY_TIMEOUT_SECONDS
    )
    started = incarnation.started_at
    if (
        incarnation.outcome is not Outcome.RUNNING
        or incarnation.phase not in _ENGINE_STARTUP
        or incarnation.modes.role == ROLE_WEIGHT_CACHE
        or started is None
    ):
        return False, timeout, None
    try:
        deadline = started + timedelta(seconds=timeout)
    except OverflowError:
        return False, timeout, None
    remaining = max(0.0, _seconds(deadline, now))
    return expected_ready_at is not None and expected_ready_at > deadline, timeout, remaining
