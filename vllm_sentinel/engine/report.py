"""Render unit snapshots: the JSON document of ``replay --output json`` and ``/status``, and the
human timeline with a verdict (core: pure).

JSON shape (stable; extra keys may be added, none removed)::

    {"units": [{"unit": str, "host": str|null, "log_times_local": bool, "incarnations": [{
        "id": str|null, "started_at": iso8601|null, "ended_at": iso8601|null,
        "phases": [{"phase": str, "entered_at": iso8601|null}],
        "furthest_phase": str, "outcome": str,
        "crash": null | {"cause": str, "exception": str, "message": str, "phase": str,
                         "at": iso8601|null, "invocation_id": str|null, "settled": bool,
                         "hint": {"text": str, "runbook": str, "rule": str}},
        "pids": [int], "benign_errors": int,
        "benign_lines": [{"line": str, "why": str}],
        "vllm_version": str|null, "model": str|null, "tensor_parallel_size": int|null,
        "progress": {...},
        "startup": null | {"seconds": float, "usual_seconds": float|null,
                           "compared_starts": int, "same_model": bool,
                           "phases": [{"phase": str, "seconds": float,
                                       "usual_seconds": float|null}]}}],
      "starts_total": int, "crashes_total": {cause: int}, "benign_errors_total": int,
      "crashes_settling": int, "last_crash": null | {...as "crash"},
      "stalled": bool, "slow": bool, "usual_phase_seconds": float|null,
      "eta_seconds": float|null, "expected_ready_at": iso8601|null, "eta_basis": str|null,
      "eta_overdue_seconds": float|null,
      "starts_last_24h": int, "crashes_last_24h": int, "last_24h_capped": bool}]}

Times are ISO 8601 in UTC with a ``Z``, except in a unit whose ``log_times_local`` is true: its
log (plain text without zones: vLLM's header, journald's short format) gave its host's local
time, whose offset is unknown, so its times are written as printed, without an offset
(``2026-11-04T18:02:56``, ISO 8601 local time; ``iso_time``). ``/status`` units (the
journal's real times) never are.
(the ``*_last_24h`` keys when a reference time is given: ``/status`` has them, ``replay`` not;
``/status`` adds ``gpu_memory_used_bytes``, ``unhealthy`` and ``health``, see
``health_to_json``). A crash is ``settled`` once it is counted in ``crashes_total`` (its cause
final: ``settle_seconds`` after the exit, longer while its traceback is still arriving);
``crashes_settling`` counts the unit's crashes seen but not counted yet, and
``crashes_last_24h`` only settled ones. ``eta_overdue_seconds``: how long ago the ETA ran out
(``eta_seconds`` is ``null`` then, never 0 as if imminent).
Crash hints come from ``hints.hint_for``; ``/status`` gives them the host's GPU processes.
``invocation_id`` is the crashed incarnation's systemd invocation id (``_SYSTEMD_INVOCATION_ID``
of journal JSON; ``null`` when the input did not say, as in plain text).
``startup`` is there for an incarnation that reached ready with its start seen: its phase
durations against the median of the earlier such incarnations of the unit in the same
document (``eta.compare_startup``: the same model's, else any model's).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Outcome, Phase
from vllm_sentinel.engine.eta import (
    ETA_BASES,
    StartupComparison,
    compare_startup,
    remember,
    startup_record,
)
from vllm_sentinel.engine.hints import (
    HintContext,
    explain_benign,
    hint_context,
    hint_for,
    without_weight_caches,
)
from vllm_sentinel.engine.modes_report import (  # vLLM 2026 modes (vllm2026)
    mode_lines,
    modes_status_lines,
    modes_to_json,
    unit_modes_to_json,
)
from vllm_sentinel.engine.snapshot import (
    CollectorState,
    CrashInfo,
    EarlierIncarnations,
    EtaBasis,
    IncarnationSnapshot,
    Snapshot,
    StartupRecord,
    UnitHealth,
    UnitSnapshot,
)
from vllm_sentinel.engine.terminal_text import shortened
from vllm_sentinel.engine.tracker import RECENT_EVENTS_KEPT

__all__ = [
    "crash_to_json",
    "eta_is_lower_bound",
    "eta_text",
    "format_duration",
    "health_to_json",
    "is_settled",
    "iso_time",
    "iso_utc",
    "pending_crash_text",
    "render_status",
    "render_text",
    "startup_comparisons",
    "status_document",
    "to_json",
    "unhealthy_text",
    "unit_to_json",
    "verdict",
]


def iso_utc(value: datetime | None) -> str | None:
    """An aware time as ISO 8601 in UTC with a ``Z`` (``2026-11-28T23:37:52.123456Z``)."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def iso_time(value: datetime | None, local: bool = False) -> str | None:
    """A time of a unit's document: ``iso_utc``, or with ``local`` (the unit's log named no
    zone, ``UnitSnapshot.log_times_local``: the engine read its host's local time as if UTC)
    the time as the log printed it, as ISO 8601 local time without an offset
    (``2026-11-04T18:02:56``): a ``Z`` would say UTC, which the log never said."""
    if value is None or not local:
        return iso_utc(value)
    return value.replace(tzinfo=None).isoformat()


_DAY = timedelta(hours=24)


def crash_to_json(
    crash: CrashInfo | None,
    context: HintContext | None = None,
    *,
    settled: bool = True,
    local_times: bool = False,
) -> dict[str, Any] | None:
    """A crash as the JSON object of ``"crash"``/``"last_crash"`` (``None`` stays ``None``),
    with its fix hint (``hints.hint_for``; ``context``: the host's GPU processes) and whether
    it is ``settled`` (counted in ``crashes_total``; a ``pending`` cause never is);
    ``local_times``: its log named no zone (``iso_time``)."""
    if crash is None:
        return None
    hint = hint_for(crash, context)
    return {
        "cause": crash.cause.value,
        "exception": crash.exception,
        "message": crash.message,
        "phase": crash.phase.value,
        "at": iso_time(crash.at, local_times),
        "invocation_id": crash.invocation_id,
        "settled": settled and crash.cause is not CrashCause.PENDING,
        "hint": {"text": hint.text, "runbook": hint.runbook, "rule": hint.rule},
    }


def is_settled(unit: UnitSnapshot, crash: CrashInfo) -> bool:
    """Whether ``crash`` of ``unit`` is counted yet: a settled crash's end time is among the
    unit's ``recent_crashes`` (the tracker adds it when it settles), and its cause is never
    ``pending``."""
    if crash.cause is CrashCause.PENDING:
        return False
    return crash.at is None or crash.at in unit.recent_crashes


def _settling(unit: UnitSnapshot) -> int:
    """The unit's crashes seen but not counted yet (their cause still settling)."""
    return sum(
        1
        for item in unit.incarnations
        if item.crash is not None and not is_settled(unit, item.crash)
    )


def health_to_json(health: UnitHealth | None) -> dict[str, Any] | None:
    """What the ``/health`` probes of a unit's current incarnation say, as JSON (``None``: not
    probed): ``url``, ``up``, ``status``, ``error``, ``last_probe_at``, ``duration_seconds``,
    ``last_success_at``, ``failing_since``, ``failures`` (probes failed since then),
    ``unhealthy`` and ``served_models``."""
    if health is None:
        return None
    return {
        "url": health.url,
        "up": health.up,
        "status": health.status,
        "error": health.error,
        "last_probe_at": iso_utc(health.last_probe_at),
        "duration_seconds": health.duration_seconds,
        "last_success_at": iso_utc(health.last_success_at),
        "failing_since": iso_utc(health.failing_since),
        "failures": health.failures,
        "unhealthy": health.unhealthy,
        "served_models": list(health.served_models),
    }


def _time_of_day(value: object) -> str:
    if not isinstance(value, str):
        return "?"
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    # a time written without a zone (``iso_time``: a replayed text's) is not said to be UTC
    return moment.strftime("%H:%M:%S UTC" if moment.tzinfo is not None else "%H:%M:%S")


def _basis(value: object) -> EtaBasis | None:
    try:
        return EtaBasis(value) if isinstance(value, str) else None
    except ValueError:
        return None


def eta_is_lower_bound(basis: object) -> bool | None:
    """Whether an ETA of ``basis`` (``EtaBasis`` or its JSON value) is a lower bound.

    ``None`` without a known basis (no estimate). True for ``vllm``: the current phase's bar
    only, the phases after it not counted (``eta.ETA_BASES``).
    """
    known = _basis(basis.value if isinstance(basis, EtaBasis) else basis)
    return ETA_BASES[known][1] if known is not None else None


def eta_text(
    eta_seconds: object, expected_ready_at: object, basis: object, overdue_seconds: object
) -> str | None:
    """An ETA in words, with its basis, from the JSON fields of a unit; ``None`` without one.

    ``eta_seconds`` and ``overdue_seconds`` are numbers or ``None``, ``expected_ready_at`` an
    ISO 8601 time or ``None``, ``basis`` an ``EtaBasis`` value. A lower bound (basis ``vllm``)
    reads ``≥ 18s, this phase's bar only`` with no firm ready time; the others
    ``18s · ready at 16:10:24 UTC, from earlier starts``; an estimate that ran out
    ``overdue by 40s, this phase's bar only``.
    """
    known = _basis(basis)
    words, lower = ETA_BASES[known] if known is not None else ("", False)
    if isinstance(overdue_seconds, int | float):
        text = f"overdue by {format_duration(float(overdue_seconds))}"
    elif isinstance(eta_seconds, int | float):
        text = format_duration(float(eta_seconds))
        if lower:
            text = f"≥ {text}"
        elif isinstance(expected_ready_at, str):
            text += f" · ready at {_time_of_day(expected_ready_at)}"
    else:
        return None
    return f"{text}, {words}" if words else text


def unhealthy_text(health: Mapping[str, Any] | None) -> str | None:
    """``ready, but /health failing since 12:03:04 UTC (7 failures): HTTP 503`` for the
    ``health`` JSON of an unhealthy unit; ``None`` when it is not unhealthy. The status page
    and ``vllm-sentinel status`` say it in these words."""
    if not isinstance(health, Mapping) or health.get("unhealthy") is not True:
        return None
    failures = health.get("failures")
    count = (
        f" ({failures} failure{'s' if failures != 1 else ''})" if isinstance(failures, int) else ""
    )
    error = str(health.get("error") or "")
    why = f"HTTP {health.get('status')}" if error == "http_status" else error.replace("_", " ")
    return (
        f"ready, but /health failing since {_time_of_day(health.get('failing_since'))}{count}"
        + (f": {why}" if why else "")
    )


def pending_crash_text(crash: Mapping[str, Any] | None) -> str | None:
    """What to say of a crash that is not counted yet (``None`` for a settled one)."""
    if not isinstance(crash, Mapping) or crash.get("settled", True) is not False:
        return None
    if crash.get("cause") == CrashCause.PENDING.value:
        return (
            "cause pending: only a wrapper or a signal so far, the traceback may still be "
            "arriving; not counted until its cause is settled"
        )
    return "settling: counted once its cause is final"


def startup_comparisons(
    incarnations: Iterable[IncarnationSnapshot],
) -> list[StartupComparison | None]:
    """For each incarnation, its start against the earlier ready ones (``None``: not ready, or
    its start not seen)."""
    earlier: tuple[StartupRecord, ...] = ()
    out: list[StartupComparison | None] = []
    for item in incarnations:
        record = startup_record(item)
        if record is None:
            out.append(None)
            continue
        out.append(compare_startup(record, earlier))
        earlier = remember(earlier, record) or earlier
    return out


def _comparison(comparison: StartupComparison | None) -> dict[str, Any] | None:
    if comparison is None:
        return None
    return {
        "seconds": comparison.startup_seconds,
        "usual_seconds": comparison.usual_startup_seconds,
        "compared_starts": comparison.compared_starts,
        "same_model": comparison.same_model,
        "phases": [
            {"phase": row.phase.value, "seconds": row.seconds, "usual_seconds": row.usual_seconds}
            for row in comparison.phases
        ],
    }


def _incarnation(
    unit: UnitSnapshot,
    item: IncarnationSnapshot,
    context: HintContext | None,
    comparison: StartupComparison | None = None,
) -> dict[str, Any]:
    progress = item.progress
    local = unit.log_times_local
    return {
        "id": item.id,
        "started_at": iso_time(item.started_at, local),
        "ended_at": iso_time(item.ended_at, local),
        "phases": [
            {"phase": entry.phase.value, "entered_at": iso_time(entry.entered_at, local)}
            for entry in item.phases
        ],
        "furthest_phase": item.furthest_phase.value,
        "outcome": item.outcome.value,
        "crash": crash_to_json(
            item.crash,
            context,
            settled=item.crash is None or is_settled(unit, item.crash),
            local_times=local,
        ),
        "pids": list(item.pids),
        "benign_errors": item.benign_errors,
        "benign_lines": [{"line": line, "why": explain_benign(line)} for line in item.benign_lines],
        "records": item.records,
        "vllm_version": item.vllm_version,
        "model": item.model,
        "tensor_parallel_size": item.tensor_parallel_size,
        "progress": {
            "weights_loaded_ratio": progress.weights_loaded_ratio,
            "weights_shards_loaded": progress.weights_shards_loaded,
            "weights_shards_total": progress.weights_shards_total,
            "model_weights_bytes": progress.model_weights_bytes,
            "weights_load_seconds": progress.weights_load_seconds,
            "compile_seconds": progress.compile_seconds,
            "kv_cache_bytes": progress.kv_cache_bytes,
            "kv_cache_tokens": progress.kv_cache_tokens,
            "cuda_graph_bytes": progress.cuda_graph_bytes,
            "cuda_graph_capture_seconds": progress.cuda_graph_capture_seconds,
            "engine_init_seconds": progress.engine_init_seconds,
        },
        "startup": _comparison(comparison),
        "modes": modes_to_json(item, local),  # modes_report (vllm2026)
    }


def unit_to_json(
    unit: UnitSnapshot, context: HintContext | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """One unit as a JSON-ready dict.

    Args:
        unit: the unit's snapshot.
        context: what the hints may use beyond the log (the host's GPU processes).
        now: the reference time of the ``*_last_24h`` counts (left out when ``None``).
    """
    if context is None:
        context = hint_context(unit)  # the hints' journalctl commands name the unit
    local = unit.log_times_local
    document = {
        "unit": unit.unit,
        "host": unit.host,
        "log_times_local": local,
        "incarnations": [
            _incarnation(unit, item, context, comparison)
            for item, comparison in zip(
                unit.incarnations, startup_comparisons(unit.incarnations), strict=True
            )
        ],
        "starts_total": unit.starts_total,
        "crashes_total": {
            cause.value: count for cause, count in sorted(unit.crashes_total.items())
        },
        "benign_errors_total": unit.benign_errors_total,
        "crashes_settling": _settling(unit),
        "stalled": unit.stalled,
        "last_progress_at": iso_time(unit.last_progress_at, local),
        "phase_durations_seconds": {
            phase.value: seconds for phase, seconds in unit.phase_durations.items()
        },
        "startup_duration_seconds": unit.startup_duration_seconds,
        "last_crash": crash_to_json(
            unit.last_crash,
            context,
            settled=unit.last_crash is None or is_settled(unit, unit.last_crash),
            local_times=local,
        ),
        "slow": unit.slow,
        "usual_phase_seconds": unit.usual_phase_seconds,
        "eta_seconds": unit.eta_seconds,
        "expected_ready_at": iso_time(unit.expected_ready_at, local),
        "eta_basis": unit.eta_basis.value if unit.eta_basis is not None else None,
        "eta_overdue_seconds": unit.eta_overdue_seconds,
        **unit_modes_to_json(unit),  # modes_report (vllm2026)
    }
    earlier = unit.earlier
    if earlier.count:
        document["earlier_incarnations"] = {
            "count": earlier.count,
            "by_outcome": dict(earlier.by_outcome),
            "first_started_at": iso_time(earlier.first_started_at, local),
            "last_ended_at": iso_time(earlier.last_ended_at, local),
        }
    if now is not None:
        since = now - _DAY
        starts = sum(1 for moment in unit.recent_starts if moment > since)
        crashes = sum(1 for moment in unit.recent_crashes if moment > since)
        document["starts_last_24h"] = starts
        document["crashes_last_24h"] = crashes
        # the ring keeps RECENT_EVENTS_KEPT times: a full ring inside the window is a floor
        document["last_24h_capped"] = RECENT_EVENTS_KEPT in (starts, crashes)
    return document


def to_json(units: Iterable[UnitSnapshot]) -> dict[str, Any]:
    """The ``{"units": [...]}`` document."""
    return {"units": [unit_to_json(unit) for unit in units]}


def format_duration(seconds: float | None) -> str:
    """``3725.2`` → ``1h02m05s``; ``None`` → ``?``."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _clock(value: datetime | None) -> str:
    """A time as the timeline prints it: to the second, the fraction cut (as journalctl and
    vLLM's header print times)."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "?"


def _shown_seconds(start: datetime, end: datetime) -> float:
    """The seconds between two times as ``_clock`` prints them (each cut to its second): the
    duration beside printed times is their difference, so that entering at 10:00:00.9 and
    leaving at 10:00:02.1 reads 2s, not the 1s that 1.2 s rounds to."""
    return (end.replace(microsecond=0) - start.replace(microsecond=0)).total_seconds()


_AT_THE_END = frozenset({Phase.READY, Phase.STOPPING})
"""Phases whose verdict reads ``ready (the log ends here)`` when entered on the last line."""


def verdict(
    item: IncarnationSnapshot, now: datetime | None = None, usual_seconds: float | None = None
) -> str:
    """One sentence on an incarnation: what it is doing or how it ended.

    ``usual_seconds``, given for a start that is slower than usual, names the usual duration
    of its current phase.
    """
    if item.outcome is Outcome.CRASHED and item.crash is not None:
        crash = item.crash
        message = crash.message.strip()
        what = (
            f"{crash.exception}: {message}"
            if crash.exception and message
            else (crash.exception or message)
        )
        text = f"crashed during {crash.phase.value} — root cause {crash.cause.value}"
        return f"{text}: {what}" if what else text
    if item.outcome is Outcome.STOPPED:
        return f"stopped cleanly (furthest phase {item.furthest_phase.value})"
    entered = item.phase_entered_at
    since = ""
    reference = now or item.last_record_at
    if entered is not None and reference is not None:
        seconds = (reference - entered).total_seconds()
        # entered on the last line: no time in it to speak of (never "ready for 0s")
        ended = format_duration(seconds) == format_duration(0) and item.phase in _AT_THE_END
        since = " (the log ends here)" if ended else f" for {format_duration(seconds)}"
    if item.outcome is Outcome.READY and item.phase is Phase.READY:
        return f"ready{since}"
    if item.phase is Phase.SLEEPING:  # vLLM sleep mode (vllm2026)
        return f"sleeping{since}: ready, its GPU memory freed until it is woken"
    if item.phase is Phase.STOPPING:
        return f"stopping{since}"
    ratio = item.progress.weights_loaded_ratio
    extra = f", weights {ratio:.0%} loaded" if item.phase is Phase.LOADING_WEIGHTS and ratio else ""
    if usual_seconds is not None:
        extra += f", slower than usual ({format_duration(usual_seconds)})"
    return f"still starting: {item.phase.value}{since}{extra} (log ends here)"


def _startup_line(
    comparison: StartupComparison, earlier: Sequence[IncarnationSnapshot] = (), summed: int = 0
) -> str:
    """The startup line of a start that became ready; ``earlier``: the unit's incarnations
    shown before it (to say why none is compared with); ``summed``: how many earlier ones
    were summed up (``--last``), which nothing here was compared with."""
    took = format_duration(comparison.startup_seconds)
    if not comparison.compared_starts:
        verb = "is" if summed == 1 else "are"
        among = (
            f" ({_many(summed, 'earlier incarnation')} summed up {verb} not compared with: "
            "--all compares with every one)"
            if summed
            else ""
        )
        if not earlier:
            return f"    startup {took}: no earlier start in this input to compare with{among}"
        if any(startup_record(item) is not None for item in earlier):  # vllm2026
            return (
                f"    startup {took}: no earlier start in this input that loaded the same way "
                f"(full loads, weight-cache maps and startup-plan boots are compared apart){among}"
            )
        excerpt = any(item.furthest_phase is Phase.READY for item in earlier)
        why = " with its start seen (one read from its middle has no whole durations)"
        why = why if excerpt else ""
        return f"    startup {took}: no earlier start in this input that became ready{why}{among}"
    whose = "of this model" if comparison.same_model else "of any model"
    starts = "start" if comparison.compared_starts == 1 else "starts"
    usual = format_duration(comparison.usual_startup_seconds)
    return (
        f"    startup {took} against a usual {usual} (median of {comparison.compared_starts} "
        f"earlier {starts} {whose})"
    )


def _eta_line(unit: UnitSnapshot) -> str | None:
    basis = unit.eta_basis
    if basis is None:
        return None
    words, lower = ETA_BASES[basis]
    if unit.eta_overdue_seconds is not None:
        return (
            f"    eta: overdue by {format_duration(unit.eta_overdue_seconds)} as the log ends "
            f"(basis {basis.value}: its estimate ran out)"
        )
    if unit.eta_seconds is None:
        return None
    took = format_duration(unit.eta_seconds)
    if lower:
        return (
            f"    eta: ready in at least {took}, as the log ends (basis {basis.value}: "
            f"{words}, a lower bound)"
        )
    when = f" at {_clock(unit.expected_ready_at)}" if unit.expected_ready_at else ""
    return f"    eta: ready in about {took}{when}, as the log ends (basis {basis.value})"


def _wrapped(line: str, width: int | None) -> list[str]:
    """``line`` indented by 4, or wrapped to ``width`` with continuations indented by 6."""
    if width is None:
        return [f"    {line}"]
    return textwrap.wrap(
        line,
        width=max(width, 40),
        initial_indent="    ",
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,  # a URL or a path stays whole
    )


def _many(count: int, thing: str) -> str:
    """``1 crash``, ``2,001 crashes``, ``1 incarnation``: a count and its noun."""
    if count == 1:
        return f"1 {thing}"
    return f"{count:,} {thing}es" if thing.endswith(("sh", "ch", "s")) else f"{count:,} {thing}s"


def _counts(counts: Mapping[str, int]) -> str:
    """``{"killed": 1000, "kv_cache_insufficient": 993}`` → ``1,000 killed, 993 kv_…``."""
    return ", ".join(f"{count:,} {label}" for label, count in counts.items())


def _earlier_line(earlier: EarlierIncarnations) -> str:
    """The line that sums up the incarnations the tracker no longer keeps."""
    when = []
    if earlier.first_started_at is not None:
        when.append(f"first at {_clock(earlier.first_started_at)}")
    if earlier.last_ended_at is not None:
        when.append(f"last ended {_clock(earlier.last_ended_at)}")
    times = f" ({', '.join(when)})" if when else ""
    summed = _many(earlier.count, "earlier incarnation")
    return f"{summed}: {_counts(earlier.by_outcome)}{times}"


def _totals_line(unit: UnitSnapshot) -> str:
    """The unit's starts and crashes over the whole input (shown when some were summed up)."""
    crashes = sum(unit.crashes_total.values())
    by_cause = dict(
        sorted(
            ((cause.value, count) for cause, count in unit.crashes_total.items() if count),
            key=lambda item: (-item[1], item[0]),
        )
    )
    detail = f": {_counts(by_cause)}" if by_cause else ""
    return f"totals: {_many(unit.starts_total, 'start')}, {_many(crashes, 'crash')}{detail}"


def render_text(
    units: Iterable[UnitSnapshot],
    now: datetime | None = None,
    *,
    width: int | None = None,
    runbook: str | None = None,
) -> str:
    """The human timeline: per unit, each incarnation's phases, durations and verdict.

    Each phase's row has the time it was entered, to the second (the fraction cut, as
    journalctl prints it), and how long it lasted: the difference of its printed time and the
    next row's, so the printed times and durations always agree. The startup line and the
    usual durations are measured to the microsecond, then rounded to the second.

    An incarnation that reached ready shows each phase's usual duration (the median of the
    earlier ready ones in the input) and its startup against the usual; the current one, when
    still starting, its ETA if there is a basis.

    Args:
        units: the units to show.
        now: the time open phases are measured to (``None``: their last record).
        width: wrap each verdict and hint to this many columns (a terminal's width),
            continuation lines indented under it; ``None`` keeps each on one line (for pipes
            and ``grep``).
        runbook: the runbook hints link into, ``#<cause>`` appended (the file the package
            installed, for a command without a daemon); ``None``: the hint's own link.
    """
    out: list[str] = []
    for unit in units:
        where = f" on {unit.host}" if unit.host else ""
        earlier = unit.earlier
        if earlier.count:
            total = earlier.count + len(unit.incarnations)
            out.append(
                f"unit {unit.unit}{where}: {_many(total, 'incarnation')} (the last "
                f"{len(unit.incarnations):,} shown; --all shows every one)"
            )
            out.append(f"  {_earlier_line(earlier)}")
        else:
            out.append(f"unit {unit.unit}{where}: {_many(len(unit.incarnations), 'incarnation')}")
        comparisons = startup_comparisons(unit.incarnations)
        pairs = zip(unit.incarnations, comparisons, strict=True)
        context = hint_context(unit)  # its unit, and the crashes a later start recovered from
        for number, (item, comparison) in enumerate(pairs, earlier.count + 1):
            usual = (
                {row.phase: row.usual_seconds for row in comparison.phases}
                if comparison is not None and comparison.compared_starts
                else {}
            )
            ident = f" {item.id}" if item.id else ""
            facts = [
                fact
                for fact in (
                    f"vLLM {item.vllm_version}" if item.vllm_version else "",
                    f"model {item.model}" if item.model else "",
                    f"TP={item.tensor_parallel_size}" if item.tensor_parallel_size else "",
                )
                if fact
            ]
            out.append(
                f"  incarnation {number:,}{ident}" + (f" ({', '.join(facts)})" if facts else "")
            )
            for index, entry in enumerate(item.phases):
                following = (
                    item.phases[index + 1].entered_at if index + 1 < len(item.phases) else None
                )
                took = ""
                if entry.entered_at is not None and following is not None:
                    took = format_duration(_shown_seconds(entry.entered_at, following))
                typical = usual.get(entry.phase)
                if typical is not None and took:
                    took = f"{took:<9} usual {format_duration(typical)}"
                out.append(
                    f"    {_clock(entry.entered_at):<19}  {entry.phase.value:<22} {took}".rstrip()
                )
            if comparison is not None:
                shown_before = unit.incarnations[: number - 1 - earlier.count]
                out.append(_startup_line(comparison, shown_before, earlier.count))
            for line in mode_lines(item):  # modes_report (vllm2026)
                out += _wrapped(line, width)
            if item.benign_errors:
                out.append(f"    benign errors: {item.benign_errors} (discounted, not a cause)")
                for line in item.benign_lines:
                    out.append(f"      {shortened(line, 160)}")
                    out.append(f"        why: {explain_benign(line)}")
                if item.benign_errors > len(item.benign_lines):
                    out.append(f"      … and {item.benign_errors - len(item.benign_lines)} more")
            current = item is unit.current
            slow = unit.usual_phase_seconds if current and unit.slow else None
            out += _wrapped(f"verdict: {verdict(item, now, slow)}", width)
            eta = _eta_line(unit) if current else None
            if eta is not None:
                out.append(eta)
            if item.crash is not None:
                hint = hint_for(item.crash, context)
                link = f"{runbook}#{hint.cause}" if runbook else hint.runbook
                out += _wrapped(f"hint: {hint.text} (see {link})", width)
        if earlier.count:
            out.append(f"  {_totals_line(unit)}")
        out.append("")
    return "\n".join(out).rstrip() + "\n" if out else "no vLLM records found\n"


def _collector(state: CollectorState) -> dict[str, Any]:
    return {
        "up": state.up,
        "since": iso_utc(state.since),
        "reason": state.reason,
        "reconnects_total": state.reconnects_total,
    }


def status_document(snapshot: Snapshot) -> dict[str, Any]:
    """The ``/status`` document: ``{"at", "hosts": [...], "units": [...]}``.

    ``units`` has the shape of ``replay --output json`` (each unit with its ``host``); ``hosts``
    adds each host's collectors, GPUs and skipped-record counts.
    """
    return {
        "at": iso_utc(snapshot.at),
        "hosts": [
            {
                "host": host.host,
                "collectors": {name: _collector(state) for name, state in host.collectors.items()},
                "gpus": [
                    {
                        "index": gpu.index,
                        "uuid": gpu.uuid,
                        "name": gpu.name,
                        "memory_used_bytes": gpu.memory_used_bytes,
                        "memory_total_bytes": gpu.memory_total_bytes,
                    }
                    for gpu in host.gpus
                ],
                "records_skipped": dict(host.records_skipped),
                "units": [unit.unit for unit in host.units],
            }
            for host in snapshot.hosts
        ],
        "units": [
            {
                **unit_to_json(
                    unit,
                    hint_context(  # weight-cache daemons' memory is no one's fault (vllm2026)
                        unit, without_weight_caches(host.gpu_processes, host.units), host.gpus
                    ),
                    snapshot.at,
                ),
                "gpu_memory_used_bytes": dict(unit.gpu_memory_used_bytes),
                "unhealthy": unit.health is not None and unit.health.unhealthy,
                "health": health_to_json(unit.health),
            }
            for host in snapshot.hosts
            for unit in host.units
        ],
    }


def _eta_cell(unit: Mapping[str, Any]) -> str:
    seconds = unit.get("eta_seconds")
    overdue = unit.get("eta_overdue_seconds")
    if isinstance(overdue, int | float):
        return f"overdue by {format_duration(float(overdue))}"
    if not isinstance(seconds, int | float):
        return "-"
    lower = "≥" if eta_is_lower_bound(unit.get("eta_basis")) else ""
    return lower + format_duration(float(seconds))


def _no_units(document: Mapping[str, Any]) -> list[str]:
    """Why a daemon shows no unit: per host, what it looks for and whether it can read it.

    Reads each host's ``unit_patterns`` and ``units_followed`` (``/status`` of a daemon) and its
    journal collector; a document without them says only that no unit was seen.
    """
    lines = ["no units seen yet:"]
    hosts = document.get("hosts") or []
    if not hosts:
        lines.append("  no host is watched (an empty shard?)")
    for host in hosts:
        name = host.get("host")
        patterns = ", ".join(host.get("unit_patterns") or []) or "its units"
        followed = host.get("units_followed") or []
        journal = (host.get("collectors") or {}).get("journal")
        if journal is None or journal.get("reason") == "starting":
            lines.append(
                f"  {name}: the journal collector is starting; it will look for {patterns}"
            )
        elif journal is not None and not journal.get("up"):
            lines.append(
                f"  {name}: the journal cannot be read ({journal.get('reason')}), so "
                f"{patterns} cannot be looked for"
            )
        elif followed:
            lines.append(
                f"  {name}: follows {', '.join(followed)}, which logged nothing in the "
                "backfill window yet"
            )
        else:
            lines.append(f"  {name}: no unit in its journal matches {patterns} yet")
    return lines


def render_status(document: Mapping[str, Any], *, runbook: str | None = None) -> str:
    """A table of a ``/status`` document: collectors per host, then one line per unit.

    ``runbook``: the daemon's runbook page (``URL/runbook``) the hints link into, ``#<cause>``
    appended; ``None``: the hint's own link (``/runbook#<cause>``).
    """
    out = [f"vllm-sentinel at {document.get('at')}"]
    for host in document.get("hosts", []):
        collectors = ", ".join(
            f"{name} {'up' if state.get('up') else 'DOWN (' + str(state.get('reason')) + ')'}"
            for name, state in host.get("collectors", {}).items()
        )
        out.append(f"host {host.get('host')}: {collectors or 'no collectors'}")
    if not document.get("units"):
        out += _no_units(document)
        return "\n".join(out) + "\n"
    rows: list[tuple[str, ...]] = []
    notes: list[list[str]] = []
    for unit in document.get("units", []):
        incarnations = unit.get("incarnations") or [{}]
        current = incarnations[-1]
        phases = current.get("phases") or [{}]
        last = unit.get("last_crash") or next(
            (item["crash"] for item in reversed(incarnations) if item.get("crash")), None
        )
        crash = "-"
        if last:
            detail = last["exception"] or shortened(last["message"], 40)
            crash = f"{last['cause']}: {detail}" if detail else last["cause"]
            if last.get("settled") is False:
                crash += " (not counted yet)"
        health = unhealthy_text(unit.get("health"))
        # what PHASE does not say (an OUTCOME column said "running" beside a stalled unit)
        state = [
            word
            for word, on in (
                ("stalled", unit.get("stalled")),
                ("slow", unit.get("slow") and not unit.get("stalled")),
                ("unhealthy", health),
                ("will-time-out", unit.get("will_time_out")),  # vllm2026
            )
            if on
        ]
        rows.append(
            (
                str(unit.get("host") or "-"),
                str(unit.get("unit")),
                str(phases[-1].get("phase", "?")),
                ",".join(state) or "-",
                _eta_cell(unit),
                crash,
            )
        )
        below = []
        if health:
            below.append(f"health: {health}")
        pending = pending_crash_text(last)
        if pending:
            below.append(f"crash: {pending}")
        hint = (last or {}).get("hint") or {}
        if hint.get("text"):
            link = f"{runbook}#{last['cause']}" if runbook and last else hint.get("runbook")
            below.append(f"hint: {hint['text']} (see {link})")
        eta = eta_text(
            unit.get("eta_seconds"),
            unit.get("expected_ready_at"),
            unit.get("eta_basis"),
            unit.get("eta_overdue_seconds"),
        )
        if eta:
            below.append(f"eta: {eta}")
        below += modes_status_lines(unit)  # modes_report (vllm2026)
        notes.append(below)
    header = ("HOST", "UNIT", "PHASE", "STATE", "ETA", "LAST CRASH")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]

    def line(cells: tuple[str, ...]) -> str:
        """Each column as wide as its widest cell, two spaces between (the last one free)."""
        return "  ".join(
            [*(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)), cells[-1]]
        )

    out.append(line(header))
    indent = " " * (widths[0] + 2)  # notes under the UNIT column
    for row, below in zip(rows, notes, strict=True):
        out.append(line(row))
        out += [indent + note for note in below]
    return "\n".join(out) + "\n"
