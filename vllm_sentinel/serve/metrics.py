"""The metric families, as one table (edge: read by the exporter, pure itself).

Each row of ``METRICS`` names a family, its type, its help sentence, its label names and a
function from a ``Snapshot`` to samples ``(label values, value)``. The exporter turns rows into
prometheus_client families at scrape time; ``metrics_markdown_table()`` turns the same rows into
the table of docs/metrics.md, so the docs are the code.

Rules the rows keep (and ``tests/unit/test_metrics.py`` checks):

* names are ``vllm_sentinel_<subject>_<measure>_<unit>`` with the unit spelled out
  (``_seconds``, ``_bytes``, ``_ratio``, ``_timestamp_seconds``, ``_info``, ``_total`` for
  counters only);
* ``host`` and ``unit`` are the first labels wherever they apply;
* label values come from bounded sets (enums, GPU indexes, collector names) — the only text
  taken from logs is the crash exception and message, cut by ``bound_label``;
* one-hot series (phase, crash cause, log level) are emitted for every value, 0 or 1, so that
  ``increase()`` and ``== 1`` work from the first scrape;
* a figure that is not known yet (``None``) produces no sample rather than a made-up 0.

This module does no I/O and takes no locks: it reads the frozen snapshot only. Time "now" is
``snapshot.at``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from vllm_sentinel import __version__
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import PHASE_ORDER, STARTUP_PHASES, Phase
from vllm_sentinel.engine.counters import LOG_LEVELS, UnitCounters
from vllm_sentinel.engine.decode.journal_json import SKIP_REASONS
from vllm_sentinel.engine.snapshot import HostSnapshot, IncarnationSnapshot, Snapshot, UnitSnapshot
from vllm_sentinel.engine.terminal_text import printable
from vllm_sentinel.engine.tracker import RATE_LIMITED_REASON
from vllm_sentinel.state.history_store import HISTORY_SKIP_REASON

__all__ = [
    "LABEL_VALUE_LIMIT",
    "LOG_LEVELS",
    "METRICS",
    "RELOAD_RESULTS",
    "MetricDefinition",
    "MetricType",
    "Sample",
    "bound_label",
    "metrics_markdown_table",
]

LABEL_VALUE_LIMIT = 120
"""The longest label value taken from log text (exception class, crash message, model)."""


Sample = tuple[tuple[str, ...], float]
"""One series: its label values (in the row's label order) and its value."""


class MetricType(StrEnum):
    """The Prometheus types the table uses."""

    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class MetricDefinition:
    """One metric family: a row of the table.

    Attributes:
        name: the full name; counters include ``_total``.
        type: gauge or counter.
        help: one sentence ending with a period.
        labels: label names, ``host`` and ``unit`` first where they apply.
        samples: snapshot → ``(label values, value)`` for every series.
        reads_clock: the samples depend on ``snapshot.at`` (now), not only on the hosts'
            snapshots. A row with ``host`` as its first label and ``reads_clock`` false yields,
            host after host in ``snapshot.hosts`` order, samples that depend on that host's
            ``HostSnapshot`` alone: the exporter keeps each host's rendered lines while the
            Monitor republishes the same ``HostSnapshot`` object.
    """

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    samples: Callable[[Snapshot], Iterable[Sample]]
    reads_clock: bool = False


_ELLIPSIS = "…"
_WORD_CUT_MIN = 0.5  # a word boundary in the last half of the room; else cut the long word


def bound_label(value: str | None, limit: int = LABEL_VALUE_LIMIT) -> str:
    """Make a safe label value: ``""`` for None, control sequences and characters removed
    (``terminal_text.printable``), whitespace collapsed, valid UTF-8, cut.

    A value longer than ``limit`` characters keeps its words up to the last space that
    leaves room for ``…`` and ends with it (the hints' convention): at most ``limit``
    characters. A single word too long for that (a path, a hash) is cut inside, but never
    between a letter and its combining marks; Python strings are whole code points, so a
    multi-byte UTF-8 character is never split.
    """
    if not value:
        return ""
    text = " ".join(printable(value).split())  # no terminal control sequence in a label
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    room = limit - len(_ELLIPSIS)
    space = text.rfind(" ", 0, room + 1)
    end = space if space >= room * _WORD_CUT_MIN else room
    while 0 < end < len(text) and unicodedata.combining(text[end]):
        end -= 1  # the mark at the cut belongs to the letter before it: drop both
    return text[:end] + _ELLIPSIS


_PHASE_VALUES = tuple((phase, phase.value) for phase in PHASE_ORDER)
# pending is what last_crash_info says before a crash settles; it is never counted
_CAUSE_NAMES = tuple(c.value for c in CrashCause if c is not CrashCause.PENDING)
_SKIP_REASONS = frozenset(SKIP_REASONS) | {HISTORY_SKIP_REASON, RATE_LIMITED_REASON}
_STARTUP_VALUES = tuple((phase, phase.value) for phase in STARTUP_PHASES)


def _seconds(value: datetime) -> float:
    return value.timestamp()


def _units(snapshot: Snapshot) -> Iterator[tuple[str, UnitSnapshot]]:
    for host in snapshot.hosts:
        for unit in host.units:
            yield host.host, unit


def _currents(snapshot: Snapshot) -> Iterator[tuple[str, UnitSnapshot, IncarnationSnapshot]]:
    for host, unit in _units(snapshot):
        current = unit.current
        if current is not None:
            yield host, unit, current


def _unit_phase(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        name, now = unit.unit, current.phase
        for phase, value in _PHASE_VALUES:
            yield (host, name, value), 1.0 if phase is now else 0.0


def _unit_phase_seconds(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        entered = current.phase_entered_at
        if entered is not None:
            # Log time may run ahead of the daemon's clock (skew between hosts): never negative.
            yield (host, unit.unit), max(0.0, (snapshot.at - entered).total_seconds())


def _unit_phase_entered(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        entered = current.phase_entered_at
        if entered is not None:
            yield (host, unit.unit), _seconds(entered)


def _unit_incarnation_started(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        if current.started_at is not None:
            yield (host, unit.unit), _seconds(current.started_at)


def _unit_incarnation_info(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        tp = current.tensor_parallel_size
        labels = (
            host,
            unit.unit,
            bound_label(current.id),
            bound_label(current.vllm_version),
            bound_label(current.model),
            str(tp) if tp is not None else "",
        )
        yield labels, 1.0


_NOTHING_SAVED = UnitCounters()


def _counters(snapshot: Snapshot) -> Iterator[tuple[str, str, UnitCounters | UnitSnapshot]]:
    """Each unit's counters: as saved with the cursor when the host says (the daemon), else
    as the unit counted them (``starts_total`` … of either, by the same names below)."""
    for host in snapshot.hosts:
        saved = host.saved_counters
        for unit in host.units:
            if saved is None:
                yield host.host, unit.unit, unit
            else:
                yield host.host, unit.unit, saved.get(unit.unit, _NOTHING_SAVED)


def _unit_starts(snapshot: Snapshot) -> Iterator[Sample]:
    for host, name, counts in _counters(snapshot):
        starts = counts.starts if isinstance(counts, UnitCounters) else counts.starts_total
        yield (host, name), float(starts)


def _unit_crashes(snapshot: Snapshot) -> Iterator[Sample]:
    for host, name, counts in _counters(snapshot):
        crashes = counts.crashes if isinstance(counts, UnitCounters) else counts.crashes_total
        if not crashes:
            for value in _CAUSE_NAMES:
                yield (host, name, value), 0.0
            continue
        # by the cause's string: hashing the enum member is a Python call per lookup
        counted = {cause.value: float(n) for cause, n in crashes.items()}
        for value in _CAUSE_NAMES:
            yield (host, name, value), counted.get(value, 0.0)


def _unit_last_crash_info(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        crash = unit.last_crash
        if crash is not None:
            labels = (
                host,
                unit.unit,
                crash.cause.value,
                crash.phase.value,
                bound_label(crash.exception),
                bound_label(crash.message),
            )
            yield labels, 1.0


def _unit_last_crash_timestamp(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        crash = unit.last_crash
        if crash is not None and crash.at is not None:
            yield (host, unit.unit), _seconds(crash.at)


def _unit_phase_duration(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        durations = unit.phase_durations
        if not durations:
            continue
        for phase, value in _PHASE_VALUES:
            seconds = durations.get(phase)
            if seconds is not None:
                yield (host, unit.unit, value), seconds


def _unit_startup_duration(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.startup_duration_seconds is not None:
            yield (host, unit.unit), unit.startup_duration_seconds


def _unit_weights_loaded_ratio(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        ratio = current.progress.weights_loaded_ratio
        if ratio is not None:
            yield (host, unit.unit), ratio


def _unit_model_weights_bytes(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        value = current.progress.model_weights_bytes
        if value is not None:
            yield (host, unit.unit), float(value)


def _unit_kv_cache_tokens(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        value = current.progress.kv_cache_tokens
        if value is not None:
            yield (host, unit.unit), float(value)


def _unit_gpu_memory_used(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        for index, used in sorted(unit.gpu_memory_used_bytes.items()):
            yield (host, unit.unit, str(index)), float(used)


def _unit_last_progress(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        at = unit.last_progress_at
        if at is not None:
            yield (host, unit.unit), _seconds(at)


def _unit_stalled(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        yield (host, unit.unit), 1.0 if unit.stalled else 0.0


def _unit_health_up(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        health = unit.health
        if health is not None and health.up is not None:
            yield (host, unit.unit), 1.0 if health.up else 0.0


def _unit_health_probe_duration(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        health = unit.health
        if health is not None and health.duration_seconds is not None:
            yield (host, unit.unit), health.duration_seconds


def _unit_health_last_success(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        health = unit.health
        if health is not None and health.last_success_at is not None:
            yield (host, unit.unit), _seconds(health.last_success_at)


def _unit_unhealthy(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        health = unit.health
        yield (host, unit.unit), 1.0 if health is not None and health.unhealthy else 0.0


def _unit_slow(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        name, slow = unit.unit, current.phase if unit.slow else None
        for phase, value in _STARTUP_VALUES:
            yield (host, name, value), 1.0 if phase is slow else 0.0


def _unit_phase_usual(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.usual_phase_seconds is not None:
            yield (host, unit.unit), unit.usual_phase_seconds


def _unit_startup_eta(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.eta_seconds is not None and unit.eta_basis is not None:
            yield (host, unit.unit, unit.eta_basis.value), unit.eta_seconds


def _unit_expected_ready(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.expected_ready_at is not None and unit.eta_basis is not None:
            yield (host, unit.unit, unit.eta_basis.value), _seconds(unit.expected_ready_at)


def _is_journal_up(host: HostSnapshot) -> bool:
    state = host.collectors.get("journal")
    return state is not None and state.up


def _unit_state_known(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        known = 1.0 if _is_journal_up(host) else 0.0
        for unit in host.units:
            yield (host.host, unit.unit), known


def _unit_log_records(snapshot: Snapshot) -> Iterator[Sample]:
    for host, name, counts in _counters(snapshot):
        records = counts.records if isinstance(counts, UnitCounters) else counts.records_by_level
        for level in LOG_LEVELS:
            yield (host, name, level), float(records.get(level, 0))


def _unit_benign_errors(snapshot: Snapshot) -> Iterator[Sample]:
    for host, name, counts in _counters(snapshot):
        benign = (
            counts.benign_errors if isinstance(counts, UnitCounters) else counts.benign_errors_total
        )
        yield (host, name), float(benign)


def _gpu_memory_used(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        for gpu in host.gpus:
            yield (host.host, str(gpu.index), bound_label(gpu.uuid)), float(gpu.memory_used_bytes)


def _gpu_memory_total(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        for gpu in host.gpus:
            labels = (host.host, str(gpu.index), bound_label(gpu.uuid))
            yield labels, float(gpu.memory_total_bytes)


def _gpu_info(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        for gpu in host.gpus:
            labels = (host.host, str(gpu.index), bound_label(gpu.uuid), bound_label(gpu.name))
            yield labels, 1.0


def _collector_up(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        for name, state in sorted(host.collectors.items()):
            yield (host.host, name), 1.0 if state.up else 0.0


def _collector_reconnects(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        for name, state in sorted(host.collectors.items()):
            yield (host.host, name), float(state.reconnects_total)


def _records_skipped(snapshot: Snapshot) -> Iterator[Sample]:
    for host in snapshot.hosts:
        counts = host.records_skipped
        for reason in sorted(counts.keys() | _SKIP_REASONS):
            yield (host.host, reason), float(counts.get(reason, 0))


def _build_info(snapshot: Snapshot) -> Iterator[Sample]:
    yield (__version__,), 1.0


RELOAD_RESULTS: tuple[str, ...] = ("success", "failure")
"""``config_reloads_total`` results: applied, or refused with the running config kept."""


def _config_reloads(snapshot: Snapshot) -> Iterator[Sample]:
    sentinel = snapshot.sentinel
    if sentinel is not None:
        for result in RELOAD_RESULTS:
            yield (result,), float(sentinel.config_reloads.get(result, 0))


def _cursor_save_failures(snapshot: Snapshot) -> Iterator[Sample]:
    if snapshot.sentinel is not None:
        yield (), float(snapshot.sentinel.cursor_save_failures_total)


def _cursor_saved(snapshot: Snapshot) -> Iterator[Sample]:
    sentinel = snapshot.sentinel
    if sentinel is not None and sentinel.cursor_saved_at is not None:
        yield (), _seconds(sentinel.cursor_saved_at)


# --- vLLM 0.33's modes: sleep, weight cache, startup plans, watchdog, ready timeout (vllm2026) -

_ROLES = ("serve", "weight_cache")
_STARTUP_KINDS = ("full", "weight_cache", "startup_plan")


def _unit_role(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        role = current.modes.role
        for value in _ROLES:
            yield (host, unit.unit, value), 1.0 if value == role else 0.0


def _unit_startup_kind(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        kind = current.modes.startup_kind
        for value in _STARTUP_KINDS:
            yield (host, unit.unit, value), 1.0 if value == kind else 0.0


def _sleeping(snapshot: Snapshot) -> Iterator[tuple[str, UnitSnapshot, IncarnationSnapshot]]:
    for host, unit, current in _currents(snapshot):
        if current.phase is Phase.SLEEPING:
            yield host, unit, current


def _unit_sleeping_since(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _sleeping(snapshot):
        if current.modes.sleeping_since is not None:
            yield (host, unit.unit), _seconds(current.modes.sleeping_since)


def _unit_sleep_freed(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _sleeping(snapshot):
        if current.modes.sleep_freed_bytes is not None:
            yield (host, unit.unit), float(current.modes.sleep_freed_bytes)


def _unit_sleep_kept(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _sleeping(snapshot):
        if current.modes.sleep_kept_bytes is not None:
            yield (host, unit.unit), float(current.modes.sleep_kept_bytes)


def _unit_fall_asleep_seconds(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        if current.modes.fall_asleep_seconds is not None:
            yield (host, unit.unit), current.modes.fall_asleep_seconds


def _unit_wake_up_seconds(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        if current.modes.wake_up_seconds is not None:
            yield (host, unit.unit), current.modes.wake_up_seconds


def _unit_watchdog_dump_info(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit, current in _currents(snapshot):
        modes = current.modes
        if modes.watchdog_dump_path is not None:
            labels = (
                host,
                unit.unit,
                bound_label(modes.watchdog_dump_path),
                bound_label(modes.watchdog_reason),
            )
            yield labels, 1.0


def _unit_stalled_by_watchdog(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        watchdog = unit.stalled and unit.stall_reason == "vllm_watchdog"
        yield (host, unit.unit), 1.0 if watchdog else 0.0


def _unit_will_time_out(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        yield (host, unit.unit), 1.0 if unit.will_time_out else 0.0


def _unit_ready_timeout(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.ready_timeout_remaining_seconds is not None and unit.ready_timeout_seconds:
            yield (host, unit.unit), unit.ready_timeout_seconds


def _unit_ready_timeout_remaining(snapshot: Snapshot) -> Iterator[Sample]:
    for host, unit in _units(snapshot):
        if unit.ready_timeout_remaining_seconds is not None:
            yield (host, unit.unit), unit.ready_timeout_remaining_seconds


# --- end of vLLM 0.33's modes ----------------------------------------------------------------


_G = MetricType.GAUGE
_C = MetricType.COUNTER
_HU = ("host", "unit")

METRICS: tuple[MetricDefinition, ...] = (
    MetricDefinition(
        "vllm_sentinel_unit_phase",
        _G,
        "1 for the phase the unit's current incarnation is in, 0 for every other phase.",
        (*_HU, "phase"),
        _unit_phase,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_phase_seconds",
        _G,
        "Seconds the current incarnation has spent in its current phase, at snapshot time.",
        _HU,
        _unit_phase_seconds,
        reads_clock=True,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_phase_entered_timestamp_seconds",
        _G,
        "When the current phase began (log time).",
        _HU,
        _unit_phase_entered,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_incarnation_started_timestamp_seconds",
        _G,
        "When the current incarnation began (log time).",
        _HU,
        _unit_incarnation_started,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_incarnation_info",
        _G,
        "Always 1: facts about the current incarnation (empty string when unknown).",
        (*_HU, "invocation_id", "vllm_version", "model", "tensor_parallel_size"),
        _unit_incarnation_info,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_starts_total",
        _C,
        "Incarnations of the unit started since the daemon first watched it (kept across "
        "restarts).",
        _HU,
        _unit_starts,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_crashes_total",
        _C,
        "Crashes of the unit by settled root cause (every cause but pending is present, 0 until "
        "seen).",
        (*_HU, "cause"),
        _unit_crashes,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_last_crash_info",
        _G,
        "Always 1: the unit's last crash, its root cause and the phase it crashed in; cause "
        "pending while the crash is not settled and only a wrapper, a consequence or a signal "
        "was seen so far.",
        (*_HU, "cause", "phase", "exception", "message"),
        _unit_last_crash_info,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_last_crash_timestamp_seconds",
        _G,
        "When the unit last crashed (log time).",
        _HU,
        _unit_last_crash_timestamp,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_phase_duration_seconds",
        _G,
        "Seconds each startup phase took in the latest incarnation that passed it.",
        (*_HU, "phase"),
        _unit_phase_duration,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_startup_duration_seconds",
        _G,
        "Seconds from start to ready of the latest incarnation that became ready.",
        _HU,
        _unit_startup_duration,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_weights_loaded_ratio",
        _G,
        "Checkpoint shards loaded over shards in total in the current incarnation, 0 to 1.",
        _HU,
        _unit_weights_loaded_ratio,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_model_weights_bytes",
        _G,
        "Bytes of model weights the current incarnation loaded, from vLLM's own report.",
        _HU,
        _unit_model_weights_bytes,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_kv_cache_tokens",
        _G,
        "Tokens the current incarnation's GPU KV cache holds, from vLLM's own report.",
        _HU,
        _unit_kv_cache_tokens,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_gpu_memory_used_bytes",
        _G,
        "Bytes of GPU memory the unit's processes hold, per GPU.",
        (*_HU, "gpu"),
        _unit_gpu_memory_used,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_last_progress_timestamp_seconds",
        _G,
        "When the unit last made progress: a log record or GPU memory growth.",
        _HU,
        _unit_last_progress,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_stalled",
        _G,
        "1 while the unit is stalled in a startup phase, else 0.",
        _HU,
        _unit_stalled,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_health_up",
        _G,
        "1 when the unit's last /health probe got HTTP 200, 0 when it failed (absent when the "
        "unit is not probed or its host could not be reached).",
        _HU,
        _unit_health_up,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_health_probe_duration_seconds",
        _G,
        "Seconds the unit's last /health probe took, up to its timeout.",
        _HU,
        _unit_health_probe_duration,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_health_last_success_timestamp_seconds",
        _G,
        "When the current incarnation's /health last answered HTTP 200.",
        _HU,
        _unit_health_last_success,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_unhealthy",
        _G,
        "1 while the unit is ready per its logs but every /health probe failed for longer "
        "than unhealthy_after_seconds, else 0.",
        _HU,
        _unit_unhealthy,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_slow",
        _G,
        "1 for the startup phase the unit is slower than usual in (past slow_factor times its "
        "usual duration for this unit and model, and slow_floor_seconds over it; never while "
        "stalled), 0 for every other startup phase.",
        (*_HU, "phase"),
        _unit_slow,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_phase_usual_seconds",
        _G,
        "Usual seconds of the current startup phase for this unit and model: the median of its "
        "recent starts that passed it (absent without history).",
        _HU,
        _unit_phase_usual,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_startup_eta_seconds",
        _G,
        "Estimated seconds until the starting unit is ready, by basis: vllm (its progress bars), "
        "history (its recent starts) or both (absent without a basis, while stalled, or once "
        "the estimate has run out: overdue).",
        (*_HU, "basis"),
        _unit_startup_eta,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_expected_ready_timestamp_seconds",
        _G,
        "When the starting unit is expected to be ready: snapshot time plus the startup ETA.",
        (*_HU, "basis"),
        _unit_expected_ready,
    ),
    # --- vLLM 0.33's modes (vllm2026): sleep, weight cache, startup plans, watchdog, timeout ---
    MetricDefinition(
        "vllm_sentinel_unit_role",
        _G,
        "1 for what the unit's current incarnation runs: serve (a vLLM server) or weight_cache "
        "(a `vllm preload` weight-cache daemon holding weights for serve units), 0 otherwise.",
        (*_HU, "role"),
        _unit_role,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_startup_kind",
        _G,
        "1 for how the current incarnation loads: full (from disk), weight_cache (mapped from a "
        "weight-cache daemon) or startup_plan (a saved startup plan skipped memory profiling); "
        "each kind has its own startup history.",
        (*_HU, "kind"),
        _unit_startup_kind,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_sleeping_since_timestamp_seconds",
        _G,
        "When the sleeping unit fell asleep (vLLM sleep mode; absent while awake).",
        _HU,
        _unit_sleeping_since,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_sleep_freed_bytes",
        _G,
        "GPU memory the sleeping unit's sleep freed, summed over its workers (absent while awake).",
        _HU,
        _unit_sleep_freed,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_sleep_kept_bytes",
        _G,
        "GPU memory still in use while the unit sleeps, summed over its workers (absent while "
        "awake).",
        _HU,
        _unit_sleep_kept,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_fall_asleep_seconds",
        _G,
        "Seconds the current incarnation's last sleep took (vLLM's own figure).",
        _HU,
        _unit_fall_asleep_seconds,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_wake_up_seconds",
        _G,
        "Seconds the current incarnation's last wake-up took (vLLM's own figure).",
        _HU,
        _unit_wake_up_seconds,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_watchdog_dump_info",
        _G,
        "Always 1 once vLLM's watchdog dumped the current incarnation's stack: where (path) "
        "and why (reason).",
        (*_HU, "path", "reason"),
        _unit_watchdog_dump_info,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_stalled_by_watchdog",
        _G,
        "1 while the unit is stalled because vLLM's own watchdog dumped its stack and nothing "
        "moved since (stall reason vllm_watchdog), else 0.",
        _HU,
        _unit_stalled_by_watchdog,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_startup_will_time_out",
        _G,
        "1 while the starting unit's ETA lies past vLLM's engine ready timeout "
        "(VLLM_ENGINE_READY_TIMEOUT_S): vLLM will give up before it is ready, else 0.",
        _HU,
        _unit_will_time_out,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_ready_timeout_seconds",
        _G,
        "The engine ready timeout that applies to the starting unit: VLLM_ENGINE_READY_TIMEOUT_S "
        "as its lines show it, else vLLM's default 600 (absent when not starting).",
        _HU,
        _unit_ready_timeout,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_ready_timeout_remaining_seconds",
        _G,
        "Seconds left before the starting unit's engine ready timeout runs out, counted from "
        "its start (absent when not starting).",
        _HU,
        _unit_ready_timeout_remaining,
    ),
    # --- end of vLLM 0.33's modes ---------------------------------------------------------------
    MetricDefinition(
        "vllm_sentinel_unit_state_known",
        _G,
        "1 when the host's journal collector is up, 0 when the phase shown is the last known.",
        _HU,
        _unit_state_known,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_log_records_total",
        _C,
        "Log records (journal entries) of the unit by vLLM level (none: no vLLM header).",
        (*_HU, "level"),
        _unit_log_records,
    ),
    MetricDefinition(
        "vllm_sentinel_unit_benign_errors_total",
        _C,
        "ERROR lines of the unit matched as benign.",
        _HU,
        _unit_benign_errors,
    ),
    MetricDefinition(
        "vllm_sentinel_gpu_memory_used_bytes",
        _G,
        "Bytes of memory in use on the GPU, by any process.",
        ("host", "gpu", "uuid"),
        _gpu_memory_used,
    ),
    MetricDefinition(
        "vllm_sentinel_gpu_memory_total_bytes",
        _G,
        "Bytes of memory the GPU has.",
        ("host", "gpu", "uuid"),
        _gpu_memory_total,
    ),
    MetricDefinition(
        "vllm_sentinel_gpu_info",
        _G,
        "Always 1: the GPU's index, UUID and product name.",
        ("host", "gpu", "uuid", "name"),
        _gpu_info,
    ),
    MetricDefinition(
        "vllm_sentinel_collector_up",
        _G,
        "1 when the host's collector (journal or gpu) works, else 0.",
        ("host", "collector"),
        _collector_up,
    ),
    MetricDefinition(
        "vllm_sentinel_collector_reconnects_total",
        _C,
        "Restarts of the host's collector after a failure.",
        ("host", "collector"),
        _collector_reconnects,
    ),
    MetricDefinition(
        "vllm_sentinel_records_skipped_total",
        _C,
        "Records of the host that could not be read, by reason: journal entries, GPU "
        "data (gpu_line_*, gpu_device_*, gpu_processes_*) and startup history files.",
        ("host", "reason"),
        _records_skipped,
    ),
    MetricDefinition(
        "vllm_sentinel_config_reloads_total",
        _C,
        "Config reloads (SIGHUP) by result: success, or failure (the running config kept).",
        ("result",),
        _config_reloads,
    ),
    MetricDefinition(
        "vllm_sentinel_cursor_save_failures_total",
        _C,
        "Writes of cursors and counters to the state directory that failed (retried).",
        (),
        _cursor_save_failures,
    ),
    MetricDefinition(
        "vllm_sentinel_cursor_saved_timestamp_seconds",
        _G,
        "When cursors and counters were last written to the state directory.",
        (),
        _cursor_saved,
    ),
    MetricDefinition(
        "vllm_sentinel_build_info",
        _G,
        "Always 1: the vllm-sentinel version serving these metrics.",
        ("version",),
        _build_info,
    ),
)
"""Every metric family the exporter serves, in exposition order."""


def metrics_markdown_table() -> str:
    """Render the table as docs/metrics.md's markdown table (one row per family)."""
    lines = ["| Metric | Type | Labels | Meaning |", "| --- | --- | --- | --- |"]
    for row in METRICS:
        labels = ", ".join(f"`{label}`" for label in row.labels)
        lines.append(f"| `{row.name}` | {row.type.value} | {labels} | {row.help} |")
    return "\n".join(lines) + "\n"
