"""``Monitor``: the one writer of state (edge: asyncio around a synchronous core).

Sources put items on one bounded queue; the Monitor applies them in order — journal batches to
the hosts' ``UnitTracker``s (then marks the cursor), GPU samples to per-unit memory and growth,
ticks to settle crashes — and publishes a frozen ``Snapshot`` as ``latest``. Nothing else
mutates trackers; the exporter and ``/status`` read ``latest`` only. ``apply`` is synchronous so
tests call it directly.

When it publishes, the Monitor adds every incarnation that reached ``ready`` to the unit's
startup history (``HistoryStore``; the backfill's too, each start once) and judges each starting
unit at "now": stalled (``stall.is_stalled``), slow against its usual phase duration for this
model (``stall.is_slow``), and its ETA to ready (``eta.estimate_ready``, withheld while stalled
or backfilling).

Publishing happens when the queue is empty, or at least every ``publish_interval_seconds``
while it stays busy, so a phase marker reaches ``/metrics`` within milliseconds without a
snapshot per record. Such a publish rebuilds only the hosts that items touched; the health and
skip counts of the others (read from their sources) and their stall flags are refreshed when
a ``Tick`` is among the items (every ``min(1 s, I / 4)``): a fleet's GPU readings arrive a
hundred times a second, and re-reading 200 hosts' sources for each cost a third of the
daemon's idle time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import structlog

from vllm_sentinel.engine.catalog.causes import DEFAULT_BENIGN_PATTERNS, BenignMatcher
from vllm_sentinel.engine.catalog.markers import MarkerMatcher
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Outcome, Phase
from vllm_sentinel.engine.counters import UnitCounters
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.eta import (
    estimate_ready,
    same_model,
    startup_record,
    usual_phase_seconds,
    will_time_out,
)
from vllm_sentinel.engine.health import (
    HealthProbeResult,
    HealthTracker,
    ProbePolicy,
    incarnation_key,
    is_probed,
    with_probe_readiness,
)
from vllm_sentinel.engine.hints import (
    hint_context,
    hint_for,
    weight_cache_units,
    without_weight_caches,
)
from vllm_sentinel.engine.report import iso_utc
from vllm_sentinel.engine.runtime_modes import watchdog_stalled
from vllm_sentinel.engine.snapshot import (
    CollectorState,
    GpuDevice,
    GpuProcessUsage,
    GpuReading,
    HostSnapshot,
    IncarnationSnapshot,
    SentinelState,
    Snapshot,
    UnitSnapshot,
)
from vllm_sentinel.engine.stall import (
    DEFAULT_SLOW_FACTOR,
    DEFAULT_SLOW_FLOOR_SECONDS,
    DEFAULT_STALL_THRESHOLDS,
    GpuGrowth,
    is_slow,
    is_stalled,
)
from vllm_sentinel.engine.tracker import TrackerSet, UnitTracker
from vllm_sentinel.sources.attribution import attribute_processes, held_by_others, place_processes
from vllm_sentinel.sources.journal import JournalBatch
from vllm_sentinel.state.cursor_store import CursorStore, HostState
from vllm_sentinel.state.history_store import HistoryStore

__all__ = ["GpuDown", "GpuSample", "HostPlan", "Monitor", "StateSaved", "Tick"]

_Ident = tuple[str | None, datetime | None]
_NOT_AFTER_READY = frozenset((*STARTUP_PHASES, Phase.READY))
_NO_COUNTERS: Mapping[str, UnitCounters] = MappingProxyType({})
_log = structlog.get_logger("vllm_sentinel.monitor")


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU poll of a host, with the unit each GPU process belongs to (from its cgroup).

    ``unit_of_pid`` may miss PIDs (no cgroup readable); the Monitor then falls back to the
    PIDs the journal showed for each unit's current incarnation.
    """

    host: str
    reading: GpuReading
    unit_of_pid: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuDown:
    """The GPU collector of ``host`` failed; its last reading is no longer current."""

    host: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passes: settle crashes, re-evaluate stalls."""

    at: datetime


@dataclass(frozen=True, slots=True)
class StateSaved:
    """The cursor store wrote hosts' states: their saved counters may be shown now."""


_Item = JournalBatch | GpuSample | GpuDown | Tick | HealthProbeResult | StateSaved


@dataclass(frozen=True, slots=True)
class HostPlan:
    """What the Monitor needs to know about one configured host."""

    name: str
    units: tuple[str, ...]
    stall_thresholds: Mapping[Phase, float] = field(
        default_factory=lambda: dict(DEFAULT_STALL_THRESHOLDS)
    )
    stall_min_growth_bytes: int = 256 << 20
    probe_policy: ProbePolicy = field(default_factory=ProbePolicy)
    slow_factor: float = DEFAULT_SLOW_FACTOR
    slow_floor_seconds: float = DEFAULT_SLOW_FLOOR_SECONDS
    # the journal is stamped by the daemon's own clock (a local host): a tick settles crashes
    # at its own time; else by the host's log time moved on (``_Host.log_anchor``)
    same_clock: bool = False


@dataclass(slots=True)
class _StartMemory:
    """What the GPU collector saw of one incarnation: the memory other processes held on each
    GPU before it loaded anything, and the GPUs its own processes then held memory on."""

    others: dict[int, int]
    used_gpus: set[int] = field(default_factory=set)

    def on_used_gpus(self) -> dict[int, int]:
        """``others`` on the GPUs the incarnation used."""
        return {gpu: size for gpu, size in self.others.items() if gpu in self.used_gpus}


_BEFORE_LOADING = frozenset({Phase.STARTING, Phase.INITIALIZING})
_STARTS_WATCHED = 4  # incarnations per unit whose start memory is kept (crashes, restarts)


@dataclass(slots=True)
class _Host:
    plan: HostPlan
    trackers: TrackerSet
    collectors: dict[str, Callable[[], CollectorState]] = field(default_factory=dict)
    skipped: dict[str, Callable[[], Mapping[str, int]]] = field(default_factory=dict)
    gpus: tuple[GpuDevice, ...] = ()
    gpu_processes: tuple[GpuProcessUsage, ...] = ()  # the latest reading's, placed in units
    unit_gpu_bytes: dict[str, dict[int, int]] = field(default_factory=dict)
    growth: dict[str, GpuGrowth] = field(default_factory=dict)
    # unit → invocation id → the GPU memory others held when it started (crash hints)
    start_memory: dict[str, dict[str, _StartMemory]] = field(default_factory=dict)
    health: dict[str, HealthTracker] = field(default_factory=dict)  # unit → its probes
    backfilling: bool = False
    # The decorated unit snapshots of the last publish, reused while nothing was applied to
    # the host (None: rebuild). A fleet's GPU samples and records touch a few hosts at a time;
    # rebuilding all of them on every publish cost 50 ms at 200 hosts × 8 units.
    published: tuple[UnitSnapshot, ...] | None = None
    starting: bool = False  # some published unit is still starting (its stall flag may move)
    snapshot: HostSnapshot | None = None  # the last published, reused while nothing changed
    touched: bool = True  # an item or a registration changed it since the last publish
    # unit → (its tracker snapshot, decorated) as last published; GPU data clears it
    decorated: dict[str, tuple[UnitSnapshot, UnitSnapshot]] = field(default_factory=dict)
    cursor: str | None = None  # the last journal cursor applied
    since: datetime | None = None  # without a cursor, records up to then are history
    changed: bool = False  # applied or settled since the last checkpoint
    saved: Mapping[str, UnitCounters] | None = None  # counters as last saved (shown)
    restored: dict[str, int] = field(default_factory=dict)  # unit → crashes counted before
    # A remote host's log time (its latest record's, a jump ahead confirmed by a second
    # record) and the daemon's time it arrived: a tick settles crashes at that log time plus
    # the daemon's time elapsed since (one clock for the window, the host's, moved on by
    # durations only; never the host's log time against the daemon's now)
    log_anchor: tuple[datetime, datetime] | None = None
    last_log_time: datetime | None = None


class Monitor:
    """Owns the trackers of every host and publishes snapshots.

    Args:
        hosts: the configured hosts.
        clock: wall clock (UTC), for "now" in snapshots and stall checks.
        cursors: where applied cursors and counters are marked by ``checkpoint`` (``None``:
            not kept).
        show_saved_counters: publish, for ``/metrics``, each host's counters as the cursor
            store last saved them (``HostSnapshot.saved_counters``) rather than as counted:
            what a restarted daemon goes on from, so that a counter never goes down.
        history: the units' startup history (``None``: kept in memory only).
        benign_patterns: ERROR lines known not to be fatal.
        max_incarnations: incarnations kept per unit.
        settle_seconds: delay before a crash is counted with its cause.
        traceback_hold_seconds: how long after its end a crash waits for a traceback that is
            still being printed.
        publish_interval_seconds: the longest a busy queue delays a publish.
        forget_unit_after_seconds: a unit whose last record is this much log time old (its
            host's, as crashes settle) is forgotten on a tick (0: never): its tracker, series
            and saved counters go (``unit_forgotten``).
    """

    def __init__(
        self,
        hosts: Sequence[HostPlan],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        cursors: CursorStore | None = None,
        history: HistoryStore | None = None,
        show_saved_counters: bool = False,
        benign_patterns: Sequence[str] = DEFAULT_BENIGN_PATTERNS,
        max_incarnations: int = 8,
        settle_seconds: float = 30.0,
        traceback_hold_seconds: float = 300.0,
        publish_interval_seconds: float = 0.1,
        forget_unit_after_seconds: float = 0.0,
    ) -> None:
        self._clock = clock
        self._cursors = cursors
        self.history = history if history is not None else HistoryStore(None)
        self._show_saved = show_saved_counters and cursors is not None
        self._matcher = MarkerMatcher()
        self._benign = BenignMatcher(benign_patterns)
        self._max_incarnations = max_incarnations
        self._settle_seconds = settle_seconds
        self._traceback_hold_seconds = traceback_hold_seconds
        self._forget_after = (
            timedelta(seconds=forget_unit_after_seconds) if forget_unit_after_seconds > 0 else None
        )
        # a log time this far ahead of the record before waits for a second record to agree
        self._log_jump = timedelta(seconds=max(traceback_hold_seconds, 10 * settle_seconds))
        self._publish_interval = publish_interval_seconds
        self._hosts: dict[str, _Host] = {}
        # per unit: the incarnation last logged (id, start), how many of its phases, the last
        self._previous: dict[tuple[str, str], tuple[_Ident, int, Phase]] = {}
        self._counted: dict[tuple[str, str], int] = {}
        self._stalled: dict[tuple[str, str], str | None] = {}  # invocation id while stalled
        self._unhealthy: set[tuple[str, str]] = set()
        self._slow: dict[tuple[str, str], str | None] = {}  # invocation id while slow
        self._ready_seen: dict[tuple[str, str], set[_Ident]] = {}  # recorded in the history
        self.applied_records_total = 0
        self._sentinel: Callable[[], SentinelState] | None = None
        for plan in hosts:
            self._hosts[plan.name] = self._new_host(plan)
        self.latest = Snapshot((), clock())

    # --- configuration -----------------------------------------------------------------

    def _new_host(self, plan: HostPlan) -> _Host:
        year = self._clock().year

        def factory(unit: str, host: str | None) -> UnitTracker:
            return UnitTracker(
                unit,
                host,
                matcher=self._matcher,
                benign=self._benign,
                max_incarnations=self._max_incarnations,
                reference_year=year,
                settle_seconds=self._settle_seconds,
                traceback_hold_seconds=self._traceback_hold_seconds,
            )

        return _Host(plan, TrackerSet(plan.units, factory=factory))

    def reconfigure(self, hosts: Sequence[HostPlan], benign_patterns: Sequence[str]) -> None:
        """Apply a reloaded config: keep the state of unchanged hosts and units."""
        self._benign = BenignMatcher(benign_patterns)
        wanted = {plan.name: plan for plan in hosts}
        for name in list(self._hosts):
            if name not in wanted:
                del self._hosts[name]
        for name, plan in wanted.items():
            host = self._hosts.get(name)
            if host is None:
                self._hosts[name] = self._new_host(plan)
                continue
            if plan.units != host.plan.units:
                old = host.trackers
                host.trackers = self._new_host(plan).trackers
                host.trackers.adopt(tracker for tracker in old if host.trackers.wants(tracker.unit))
                for unit in [unit for unit in host.growth if not host.trackers.wants(unit)]:
                    del host.growth[unit]
            host.plan = plan
            for unit in list(host.health):
                if not host.trackers.wants(unit) or not plan.probe_policy.for_unit(unit).enabled:
                    del host.health[unit]
        for host in self._hosts.values():
            host.published = None
            host.decorated.clear()
        known = (
            *self._previous,
            *self._counted,
            *self._stalled,
            *self._unhealthy,
            *self._slow,
            *self._ready_seen,
        )
        for key in [key for key in known if not self._keeps(*key)]:
            self._previous.pop(key, None)
            self._counted.pop(key, None)
            self._stalled.pop(key, None)
            self._unhealthy.discard(key)
            self._slow.pop(key, None)
            self._ready_seen.pop(key, None)

    def _keeps(self, host: str, unit: str) -> bool:
        entry = self._hosts.get(host)
        return entry is not None and entry.trackers.wants(unit)

    def register_collector(
        self,
        host: str,
        collector: str,
        state: Callable[[], CollectorState],
        skipped: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        """Let the Monitor read a source's health (and skip counts) when it publishes."""
        entry = self._hosts.get(host)
        if entry is None:
            return
        entry.collectors[collector] = state
        entry.touched = True
        if skipped is not None:
            entry.skipped[collector] = skipped

    def register_sentinel(self, state: Callable[[], SentinelState]) -> None:
        """Let the Monitor read the daemon's own state (reloads, state saving) when it
        publishes."""
        self._sentinel = state

    def unregister_collectors(self, host: str) -> None:
        """Forget the sources of ``host`` (they are being replaced)."""
        entry = self._hosts.get(host)
        if entry is not None:
            entry.touched = True
            entry.collectors.clear()
            entry.skipped.clear()

    # --- applying ------------------------------------------------------------------------

    # --- saved state ---------------------------------------------------------------------

    def restore(self, name: str, state: HostState) -> None:
        """Go on from a host's saved state: its cursor, first-start time and counters (a host
        that applied something already is left as it is)."""
        host = self._hosts.get(name)
        if host is None or host.cursor is not None or any(True for _ in host.trackers):
            return
        host.cursor = state.cursor
        host.since = state.since
        for unit, counters in state.units.items():
            if host.trackers.restore(name, unit, counters):
                host.restored[unit] = sum(counters.crashes.values())
        host.saved = dict(state.units) if not state.legacy else None
        host.published = None
        host.decorated.clear()

    def applied_cursor(self, name: str) -> str | None:
        """The journal cursor of the last record applied for host ``name``."""
        host = self._hosts.get(name)
        return host.cursor if host is not None else None

    def checkpoint(self) -> int:
        """Mark the state of every host that changed since the last call in the cursor store:
        its last applied cursor with its units' counters as they are now, which is right
        after that cursor's record (the Monitor applies whole batches between two awaits).
        Returns how many hosts were marked."""
        if self._cursors is None:
            return 0
        marked = 0
        for name, host in self._hosts.items():
            if not host.changed or (host.cursor is None and host.since is None):
                continue
            units = {tracker.unit: tracker.counters() for tracker in host.trackers}
            opens = [since for tracker in host.trackers if (since := tracker.open_since())]
            state = HostState(host.cursor, host.since, units, min(opens) if opens else None)
            self._cursors.mark(name, state)
            host.changed = False
            marked += 1
        return marked

    def apply(self, item: _Item) -> None:
        """Apply one item from the queue (synchronous: the core does the work)."""
        if isinstance(item, JournalBatch):
            host = self._hosts.get(item.host)
            if host is None:
                return
            host.backfilling = item.backfill
            host.published = None
            host.touched = True
            host.trackers.counting = not item.history
            host.trackers.feed_many(item.records)
            self._move_log_anchor(host, item.records)
            self.applied_records_total += len(item.records)
            if item.cursor is not None:
                host.cursor = item.cursor
            host.changed = True
            if not item.records and not item.backfill:  # the end of the startup backfill
                for tracker in host.trackers:
                    tracker.settle_carried()  # saved crashes the journal no longer holds
        elif isinstance(item, StateSaved):
            for name, host in self._hosts.items():
                saved = self._cursors.saved(name) if self._cursors is not None else None
                units = saved.units if saved is not None and not saved.legacy else None
                if units is not None and units is not host.saved:
                    host.saved = units
                    host.published = None
        elif isinstance(item, GpuSample):
            self._apply_gpu(item)
        elif isinstance(item, HealthProbeResult):
            self._apply_health(item)
        elif isinstance(item, GpuDown):
            host = self._hosts.get(item.host)
            if host is not None:
                host.unit_gpu_bytes.clear()
                host.gpu_processes = ()
                host.published = None
                host.touched = True
                host.decorated.clear()
        else:
            for name, host in self._hosts.items():
                self._recheck_health(host, item.at)
                if host.backfilling:
                    continue  # late lines of backfilled crashes may still be on their way
                if host.plan.same_clock:
                    log_now = item.at  # the journal is stamped by this machine's clock
                elif host.log_anchor is not None:
                    log_time, arrived = host.log_anchor
                    log_now = log_time + (item.at - arrived)
                else:
                    continue  # no log time read yet: nothing ended
                settled = False
                for tracker in host.trackers:
                    if tracker.advance(log_now):
                        host.published = None  # a crash settled
                        settled = True
                if settled:
                    host.changed = True
                if self._forget_after is not None:
                    self._forget_idle(name, host, log_now)

    def _forget_idle(self, name: str, host: _Host, log_now: datetime) -> None:
        """Forget the units of ``host`` that logged nothing for ``forget_unit_after_seconds``
        of its log time (and have no crash left to settle)."""
        assert self._forget_after is not None
        for tracker in host.trackers:
            last = tracker.last_record_at
            if last is None or log_now - last < self._forget_after:
                continue
            if tracker.unsettled_since() is not None:
                continue
            unit = tracker.unit
            host.trackers.remove(tracker.host, unit)
            for table in (host.growth, host.health, host.start_memory, host.unit_gpu_bytes):
                table.pop(unit, None)
            host.restored.pop(unit, None)
            host.decorated.pop(unit, None)
            key = (name, unit)
            for known in (
                self._previous,
                self._counted,
                self._stalled,
                self._slow,
                self._ready_seen,
            ):
                known.pop(key, None)
            self._unhealthy.discard(key)
            if host.saved is not None and unit in host.saved:
                host.saved = {u: c for u, c in host.saved.items() if u != unit}
            host.published = None
            host.touched = True
            host.changed = True  # the next checkpoint saves the host without it
            _log.info(
                "unit_forgotten",
                host=name,
                unit=unit,
                idle_seconds=round((log_now - last).total_seconds()),
            )

    def _move_log_anchor(self, host: _Host, records: Sequence[Record]) -> None:
        """Move the host's log-time anchor on by the batch's last records (see ``_Host``)."""
        previous = host.last_log_time
        agreed = None
        for record in records[-2:]:
            time = record.realtime
            if time is None:
                continue
            jumped = previous is not None and time - previous > self._log_jump
            agreed = previous if jumped else time
            previous = time
        host.last_log_time = previous
        if agreed is not None:
            host.log_anchor = (agreed, self._clock())

    def _apply_health(self, result: HealthProbeResult) -> None:
        """Take a probe result of a unit's current incarnation (a stale one is dropped)."""
        host = self._hosts.get(result.host)
        if host is None:
            return
        current = next(
            (
                tracker.snapshot().current
                for tracker in host.trackers
                if tracker.unit == result.unit
            ),
            None,
        )
        if current is None or incarnation_key(current) != result.incarnation:
            return  # the incarnation it was sent for has been replaced meanwhile
        if not host.plan.probe_policy.for_unit(result.unit).enabled:
            return  # probing was turned off by a reload while it was in flight
        health = host.health.get(result.unit)
        if health is None or health.incarnation != result.incarnation:
            health = host.health[result.unit] = HealthTracker(result.incarnation)
        health.apply(result, is_ready=current.phase is Phase.READY)
        host.published = None
        host.decorated.pop(result.unit, None)

    def _recheck_health(self, host: _Host, now: datetime) -> None:
        """Republish a unit whose unhealthy verdict changed with time alone."""
        for unit, health in host.health.items():
            if health.failing_since is None:
                continue
            threshold = host.plan.probe_policy.for_unit(unit).unhealthy_after_seconds
            cached = host.decorated.get(unit)
            shown = (
                cached is not None and cached[1].health is not None and cached[1].health.unhealthy
            )
            if health.is_unhealthy(now, threshold) != shown:
                host.published = None
                host.decorated.pop(unit, None)

    def _apply_gpu(self, sample: GpuSample) -> None:
        host = self._hosts.get(sample.host)
        if host is None:
            return
        reading = sample.reading
        host.touched = True
        trackers = list(host.trackers)
        journal_pids = {tracker.unit: tracker.current_pids() for tracker in trackers}
        attributed = attribute_processes(reading, sample.unit_of_pid, journal_pids)
        placed = place_processes(reading, sample.unit_of_pid, journal_pids)
        usage = {tracker.unit: attributed.get(tracker.unit, {}) for tracker in trackers}
        changed = (
            reading.devices != host.gpus
            or usage != host.unit_gpu_bytes
            or placed != host.gpu_processes
        )
        # what a weight-cache daemon holds is no other process's fault at a start (vllm2026)
        daemons = weight_cache_units(tracker.snapshot() for tracker in trackers)
        others = tuple(usage for usage in placed if usage.unit not in daemons)
        for tracker in trackers:
            changed = self._watch_start(host, tracker, others, usage[tracker.unit]) or changed
        for unit, per_gpu in usage.items():
            growth = host.growth.get(unit)
            if growth is None:
                growth = host.growth[unit] = GpuGrowth(host.plan.stall_min_growth_bytes)
            changed = growth.update(sum(per_gpu.values()), reading.at) or changed
        if changed:  # the same figures as before leave the published units as they are
            host.gpus = reading.devices
            host.unit_gpu_bytes = usage
            host.gpu_processes = placed
            host.published = None
            host.decorated.clear()

    @staticmethod
    def _watch_start(
        host: _Host,
        tracker: UnitTracker,
        placed: tuple[GpuProcessUsage, ...],
        own: Mapping[int, int],
    ) -> bool:
        """Keep what others held on the GPUs when the unit's current incarnation started
        (the first reading while it is still starting or initializing: a reading taken after it
        began to load says nothing about the GPU before it), and the GPUs it uses since.
        Returns True when the published unit must change."""
        current = tracker.snapshot().current
        if current is None or current.id is None or current.outcome is not Outcome.RUNNING:
            return False
        watched = host.start_memory.setdefault(tracker.unit, {})
        memory = watched.get(current.id)
        if memory is None:
            if current.phase not in _BEFORE_LOADING:
                return False
            memory = watched[current.id] = _StartMemory(held_by_others(placed, tracker.unit))
            while len(watched) > _STARTS_WATCHED:
                del watched[next(iter(watched))]  # the oldest incarnation's
        used = {gpu for gpu, size in own.items() if size > 0}
        if used <= memory.used_gpus:
            return False
        memory.used_gpus |= used
        return True

    # --- publishing ----------------------------------------------------------------------

    def publish(self, *, refresh_all: bool = True) -> Snapshot:
        """Freeze the state of every host into ``latest`` and return it.

        ``refresh_all=False`` (``run`` between ticks) rebuilds only the hosts that items or
        registrations touched since the last publish and reuses the others' last
        ``HostSnapshot`` as it is (their collector health, skip counts and stall flags wait for
        the next full publish).
        """
        now = self._clock()
        hosts = []
        rebuilt: set[str] = set()
        for name, host in self._hosts.items():
            if (
                not refresh_all
                and not host.touched
                and host.published is not None
                and host.snapshot is not None
            ):
                hosts.append(host.snapshot)
                continue
            host.touched = False
            if host.published is None:
                rebuilt.add(name)
                units = []
                for tracker in host.trackers:
                    unit = tracker.snapshot(now)
                    if not unit.incarnations:
                        continue
                    cached = host.decorated.get(tracker.unit)
                    if cached is not None and cached[0] is unit:  # this unit did not move
                        decorated = self._judged(host, cached[1], now)
                    else:
                        self._record_starts(name, unit)
                        decorated = self._decorate(host, unit, now)
                    host.decorated[tracker.unit] = (unit, decorated)
                    units.append(decorated)
                units.sort(key=lambda snapshot: snapshot.unit)
                host.published = tuple(units)
                host.starting = any(
                    unit.current is not None and unit.current.outcome is Outcome.RUNNING
                    for unit in units
                )
            elif host.starting:  # nothing applied since: only stall flags move with the clock
                published = host.published
                host.published = self._restall(host, published, now)
                if host.published is not published:
                    rebuilt.add(name)
            skipped: dict[str, int] = dict(self.history.skipped(name))
            for counts in host.skipped.values():
                for reason, value in counts().items():
                    skipped[reason] = skipped.get(reason, 0) + value
            collectors = {key: state() for key, state in host.collectors.items()}
            saved = None
            if self._show_saved:
                saved = host.saved if host.saved is not None else _NO_COUNTERS
            previous = host.snapshot
            if (
                previous is None
                or previous.units is not host.published
                or previous.gpus is not host.gpus
                or previous.gpu_processes is not host.gpu_processes
                or previous.collectors != collectors
                or previous.records_skipped != skipped
                or previous.saved_counters is not saved
            ):
                previous = host.snapshot = HostSnapshot(
                    host=name,
                    units=host.published,
                    collectors=collectors,
                    gpus=host.gpus,
                    records_skipped=skipped,
                    gpu_processes=host.gpu_processes,
                    saved_counters=saved,
                )
            hosts.append(previous)
        snapshot = Snapshot(tuple(hosts), now, self._sentinel() if self._sentinel else None)
        self._log_changes(snapshot, rebuilt)
        self.latest = snapshot
        return snapshot

    def _restall(
        self, host: _Host, units: tuple[UnitSnapshot, ...], now: datetime
    ) -> tuple[UnitSnapshot, ...]:
        """Published units judged again at ``now`` (as ``_decorate`` does)."""
        fresh = tuple(self._judged(host, unit, now) for unit in units)
        return units if all(a is b for a, b in zip(fresh, units, strict=True)) else fresh

    def _judged(self, host: _Host, unit: UnitSnapshot, now: datetime) -> UnitSnapshot:
        """A decorated unit with its stall flag, slow flag and ETA evaluated at ``now`` (the
        same object when nothing changed).

        Not while the host is backfilling: old log times against "now" would look stuck.
        """
        current = unit.current
        if current is None or current.outcome is not Outcome.RUNNING or host.backfilling:
            return unit
        plan = host.plan
        stalled = is_stalled(
            current.phase,
            current.phase_entered_at,
            unit.last_progress_at,
            now,
            plan.stall_thresholds,
        )
        watchdog = watchdog_stalled(current)  # vLLM's watchdog dumped the stack (vllm2026)
        stalled = stalled or watchdog
        records = self.history.records(plan.name, unit.unit)
        usual = usual_phase_seconds(
            same_model(records, current.model, current.modes.startup_kind), current.phase
        )
        # a phase a line said ended (markers.PHASE_ENDS) is over: the next one is under way
        slow = (
            not stalled
            and current.phase_ended_at is None
            and is_slow(
                current.phase,
                current.phase_entered_at,
                usual,
                now,
                plan.slow_factor,
                plan.slow_floor_seconds,
            )
        )
        estimate = None if stalled else estimate_ready(current, records, now)
        eta = estimate.eta_seconds if estimate is not None else None
        overdue = estimate.overdue_seconds if estimate is not None else None
        expected = estimate.expected_ready_at if estimate is not None and eta is not None else None
        times_out, timeout, remaining = will_time_out(
            current, expected, now, unit.ready_timeout_seconds
        )
        reason = ("vllm_watchdog" if watchdog else "no_progress") if stalled else None
        if (
            times_out == unit.will_time_out
            and timeout == unit.ready_timeout_seconds
            and remaining == unit.ready_timeout_remaining_seconds
            and reason == unit.stall_reason
            and stalled == unit.stalled
            and slow == unit.slow
            and usual == unit.usual_phase_seconds
            and eta == unit.eta_seconds
            and overdue == unit.eta_overdue_seconds
            and (estimate is None or estimate.basis is unit.eta_basis)
        ):
            return unit
        return replace(
            unit,
            stalled=stalled,
            slow=slow,
            usual_phase_seconds=usual,
            eta_seconds=eta,
            expected_ready_at=(
                estimate.expected_ready_at if estimate is not None and eta is not None else None
            ),
            eta_basis=estimate.basis if estimate is not None else None,
            eta_overdue_seconds=overdue,
            stall_reason=reason,
            will_time_out=times_out,
            ready_timeout_seconds=timeout,
            ready_timeout_remaining_seconds=remaining,
        )

    def _decorate(self, host: _Host, unit: UnitSnapshot, now: datetime) -> UnitSnapshot:
        """The tracker's unit with GPU memory, the stall verdict and the probes' health."""
        decorated = self._decorate_gpu(host, unit, now)
        current = decorated.current
        health = host.health.get(unit.unit)
        if (
            current is None
            or health is None
            or health.incarnation != incarnation_key(current)
            or not is_probed(current)  # ended or stopping: its last probe is history
        ):
            return with_probe_readiness(decorated, None)
        threshold = host.plan.probe_policy.for_unit(unit.unit).unhealthy_after_seconds
        probed = with_probe_readiness(decorated, health.snapshot(now, threshold))
        if probed.ready_source == "health_probe" and (probed.slow or probed.eta_basis):
            # ready by its /health while the logs lag: no longer starting, nothing to estimate
            probed = replace(
                probed,
                slow=False,
                usual_phase_seconds=None,
                eta_seconds=None,
                expected_ready_at=None,
                eta_basis=None,
                eta_overdue_seconds=None,
            )
        return probed

    def _decorate_gpu(self, host: _Host, unit: UnitSnapshot, now: datetime) -> UnitSnapshot:
        growth = host.growth.get(unit.unit)
        gpu_bytes = host.unit_gpu_bytes.get(unit.unit, {})
        watched = host.start_memory.get(unit.unit, {})
        decorated = replace(
            unit,
            gpu_memory_used_bytes=dict(gpu_bytes),
            gpu_memory_held_by_others_at_start={
                ident: memory.on_used_gpus() for ident, memory in watched.items()
            },
            last_gpu_growth_at=growth.last_growth_at if growth else None,
        )
        return self._judged(host, decorated, now)

    def _record_starts(self, host: str, unit: UnitSnapshot) -> None:
        """Add the unit's incarnations that reached ready to its startup history, once."""
        key = (host, unit.unit)
        seen = self._ready_seen.get(key, set())
        ready: set[_Ident] = set()
        for incarnation in unit.incarnations:
            if incarnation.furthest_phase is not Phase.READY:
                continue
            ident = (incarnation.id, incarnation.started_at)
            ready.add(ident)
            if ident in seen:
                continue
            record = startup_record(incarnation)
            if record is not None:
                self.history.add(host, unit.unit, record)
        self._ready_seen[key] = ready

    def _log_changes(self, snapshot: Snapshot, rebuilt: set[str] | None = None) -> None:
        for host in snapshot.hosts:
            if rebuilt is not None and host.host not in rebuilt:
                continue  # the same tracker snapshots as last time: nothing new to log
            entry = self._hosts.get(host.host)
            if entry is not None and entry.backfilling:
                continue  # history: its phase changes are not news (the end logs the state)
            for unit in host.units:
                counted = sum(unit.crashes_total.values())
                key = (host.host, unit.unit)
                before = self._counted.get(key)
                if before is None:  # first sight: what a previous run counted is not news
                    before = entry.restored.get(unit.unit, 0) if entry is not None else 0
                # logged once the root cause is settled (late lines included), as counted:
                # one event per crash, each with its own incarnation and cause
                new = unit.counted_crashes[-(counted - before) :] if counted > before else ()
                for index, crash in enumerate(new):
                    # logged once the root cause is settled (late lines included), as counted
                    processes = without_weight_caches(host.gpu_processes, host.units)
                    hint = hint_for(crash, hint_context(unit, processes, host.gpus))
                    _log.warning(
                        "unit_crashed",
                        host=host.host,
                        unit=unit.unit,
                        invocation_id=crash.invocation_id,
                        phase=crash.phase.value,
                        cause=crash.cause.value,
                        exception_class=crash.exception,
                        message=crash.message[:300],
                        hint=hint.text,
                        runbook=hint.runbook,
                        crashes_total=counted - len(new) + index + 1,
                    )
                self._counted[key] = counted
                current = unit.current
                if current is None:
                    continue
                self._log_stall(host.host, unit, current)
                self._log_health(host.host, unit, current)
                self._log_slow(host.host, unit, current)
                self._log_phases(host.host, unit, current)

    def _log_phases(self, host: str, unit: UnitSnapshot, current: IncarnationSnapshot) -> None:
        """One ``unit_phase_changed`` event per phase entered since the last publish, the
        end of the incarnation before included; the first sight of a unit (after the
        backfill) is one event with its current phase."""
        key = (host, unit.unit)
        ident = (current.id, current.started_at)
        # a ready entry added from a /health probe is not one of the tracker's phases
        overlay = 1 if unit.ready_source == "health_probe" else 0
        previous = self._previous.get(key)
        if previous is None:
            entries = [(current, current.phases[-1])] if current.phases else []
            last: Phase | None = None
        else:
            (old_ident, logged, last) = previous
            if old_ident == ident:
                entries = [(current, entry) for entry in current.phases[logged:]]
            else:
                old = next(
                    (i for i in unit.incarnations if (i.id, i.started_at) == old_ident), None
                )
                entries = [(old, entry) for entry in old.phases[logged:]] if old else []
                entries += [(current, entry) for entry in current.phases]
            if last is Phase.READY and old_ident == ident:
                # ready was logged (from a probe): the logs catching up are not news
                entries = [item for item in entries if item[1].phase not in _NOT_AFTER_READY]
        for incarnation, entry in entries:
            _log.info(
                "unit_phase_changed",
                host=host,
                unit=unit.unit,
                invocation_id=incarnation.id,
                phase=entry.phase.value,
                previous_phase=last.value if last is not None else None,
                entered_at=iso_utc(entry.entered_at),
                stalled=unit.stalled if incarnation is current else False,
            )
            last = entry.phase
        if current.phases:
            self._previous[key] = (ident, len(current.phases) - overlay, current.phases[-1].phase)

    def _log_health(self, host: str, unit: UnitSnapshot, current: IncarnationSnapshot) -> None:
        """One event when a unit becomes unhealthy, one when that ends (not per publish)."""
        key = (host, unit.unit)
        unhealthy = unit.health is not None and unit.health.unhealthy
        if unhealthy == (key in self._unhealthy):
            return
        if unhealthy and unit.health is not None:
            self._unhealthy.add(key)
            _log.warning(
                "unit_unhealthy",
                host=host,
                unit=unit.unit,
                invocation_id=current.id,
                url=unit.health.url,
                reason=unit.health.error,
                status=unit.health.status,
                failing_since=iso_utc(unit.health.failing_since),
            )
        else:
            self._unhealthy.discard(key)
            _log.info(
                "unit_unhealthy_cleared",
                host=host,
                unit=unit.unit,
                invocation_id=current.id,
                outcome=current.outcome.value,
            )

    def _log_stall(self, host: str, unit: UnitSnapshot, current: IncarnationSnapshot) -> None:
        """One event when a unit becomes stalled, one when it moves again (not per publish)."""
        key = (host, unit.unit)
        was = key in self._stalled
        if unit.stalled == was:
            return
        if unit.stalled:
            self._stalled[key] = current.id
            _log.warning(
                "unit_stalled",
                host=host,
                unit=unit.unit,
                invocation_id=current.id,
                phase=current.phase.value,
                phase_entered_at=iso_utc(current.phase_entered_at),
                last_progress_at=iso_utc(unit.last_progress_at),
            )
        else:
            stalled_id = self._stalled.pop(key)
            _log.info(
                "unit_stall_cleared",
                host=host,
                unit=unit.unit,
                invocation_id=stalled_id,
                phase=current.phase.value,
                outcome=current.outcome.value,
            )

    def _log_slow(self, host: str, unit: UnitSnapshot, current: IncarnationSnapshot) -> None:
        """One event when a unit becomes slower than usual, one when that ends."""
        key = (host, unit.unit)
        was = key in self._slow
        if unit.slow == was:
            return
        if unit.slow:
            self._slow[key] = current.id
            _log.warning(
                "unit_slow",
                host=host,
                unit=unit.unit,
                invocation_id=current.id,
                phase=current.phase.value,
                phase_entered_at=iso_utc(current.phase_entered_at),
                usual_phase_seconds=unit.usual_phase_seconds,
            )
        else:
            slow_id = self._slow.pop(key)
            _log.info(
                "unit_slow_cleared",
                host=host,
                unit=unit.unit,
                invocation_id=slow_id,
                phase=current.phase.value,
                outcome=current.outcome.value,
            )

    async def run(self, queue: asyncio.Queue[_Item]) -> None:
        """Apply queue items forever, publishing when idle or every publish interval."""
        last_publish = time.monotonic()
        while True:
            item = await queue.get()
            self.apply(item)
            queue.task_done()
            ticked = isinstance(item, Tick)
            while not queue.empty() and time.monotonic() - last_publish < self._publish_interval:
                item = queue.get_nowait()
                self.apply(item)
                queue.task_done()
                ticked = ticked or isinstance(item, Tick)
            self.publish(refresh_all=ticked)
            last_publish = time.monotonic()

    def hosts(self) -> Iterable[str]:
        """Names of the configured hosts."""
        return tuple(self._hosts)
