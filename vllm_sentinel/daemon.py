"""The daemon: wires sources, Monitor, cursor store and HTTP under one event loop (edge).

Tasks (``asyncio``): the Monitor (the one writer), a tick every second (settles crashes,
refreshes time-in-phase, stall, slow and unhealthy flags and ETAs), a flush of cursors and
startup history every ``cursor_flush_interval_seconds``, and per host a supervisor running its
``JournalFollower``, ``GpuPoller`` and, where ``health_probe`` is enabled, its
``HealthProber``. A host's failure never reaches the others: sources retry on their own, and an
unexpected error in a host's supervisor is logged with its traceback and the host restarted.
The HTTP server runs on its own threads and reads only ``Monitor.latest``. The startup history
(``<state directory>/history``) is read once before the hosts start.

Signals: SIGTERM/SIGINT stop cleanly (followers' channels are closed, cursors flushed);
SIGHUP reloads the config file — hosts and units added or removed without losing the state of
the others; an invalid new config is refused with a clear error and the old one stays.

**Host down, by construction.** A host that stops answering must show
``vllm_sentinel_collector_up 0`` within two of its poll intervals (``I`` =
``gpu_poll_interval_seconds``). The SSH keepalive interval in effect is therefore capped at
``1.25 × I / (keepalive_count_max + 1)``, so the dead connection is dropped within ``1.25 × I``
of the last byte the host sent; the tick that publishes the change comes every
``min(1 s, I / 4)``: ``collector_up`` is 0 within ``1.5 × I``. The GPU collector shares the
host's connection: while the journal collector is down because the connection was lost (or
cannot be made), the GPU collector is reported down too, whatever its last poll said.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from vllm_sentinel import __version__
from vllm_sentinel.config import Config, GpuBackend, HostConfig, load_config
from vllm_sentinel.engine.health import HealthProbeResult
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.engine.snapshot import CollectorState, GpuReading, SentinelState, Snapshot
from vllm_sentinel.errors import ConfigError, GpuCollectorError
from vllm_sentinel.monitor import GpuDown, GpuSample, HostPlan, Monitor, StateSaved, Tick
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import (
    BasicAuthenticator,
    ConnectionLimits,
    ServerHandle,
    load_exporter_security,
    make_app,
    start_http_server,
)
from vllm_sentinel.sources.gpu import (
    CgroupReader,
    GpuPoller,
    GpuReader,
    NvidiaSmiStreamReader,
    NvmlReader,
)
from vllm_sentinel.sources.health_probe import HealthProber
from vllm_sentinel.sources.journal import (
    FollowerSettings,
    HistoryBoundary,
    JournalBatch,
    JournalFollower,
)
from vllm_sentinel.sources.transport import LocalTransport, SshSettings, SshTransport, Transport
from vllm_sentinel.state.cursor_store import CursorStore, HostState, lock_name
from vllm_sentinel.state.history_store import HistoryStore

__all__ = [
    "HOST_DOWN_DETECTION_RATIO",
    "Daemon",
    "effective_ssh_settings",
    "host_plan",
    "serve_http",
    "tick_interval_seconds",
]

_log = structlog.get_logger("vllm_sentinel.daemon")
Item = JournalBatch | GpuSample | GpuDown | Tick | HealthProbeResult | StateSaved
_QUEUE_SIZE = 4096
_MAX_TICK_SECONDS = 1.0
_HOST_STOP_SECONDS = 10.0
_GPU_REPEATS_SKIPPED = 10  # of ten equal GPU readings in a row, one is queued

HOST_DOWN_DETECTION_RATIO = 1.25
"""A dead SSH peer is dropped within this many poll intervals (the tick adds at most 1/4)."""

_UNREACHABLE_REASONS = frozenset(
    {"ssh_connect_failed", "ssh_connection_lost", "ssh_channel_failed", "ssh_auth_failed"}
)
"""Journal collector reasons that mean the host itself cannot be reached."""


def effective_ssh_settings(host: HostConfig) -> SshSettings | None:
    """The host's SSH settings, keepalive capped so a dead peer is dropped in 1.25 intervals.

    When the configured ``interval × (count_max + 1)`` exceeds that budget, the keepalive in
    effect is ``1.25 × I / 2`` with ``count_max`` 1: the same detection time as any split of
    the budget, with the fewest keepalives (asyncssh sends one after each ``interval`` without
    traffic; the GPU stream's round every ``I`` resets the timer, so about one a poll instead
    of ``count_max`` — at 200 hosts, 200 round trips a second fewer for count_max 3).
    """
    settings = host.ssh_settings()
    if settings is None:
        return None
    budget = HOST_DOWN_DETECTION_RATIO * host.gpu_poll_interval_seconds
    configured = settings.keepalive_interval_seconds
    if configured <= 0 or configured * (settings.keepalive_count_max + 1) > budget:
        count = min(settings.keepalive_count_max, 1)
        settings = replace(
            settings, keepalive_interval_seconds=budget / (count + 1), keepalive_count_max=count
        )
    return settings


def tick_interval_seconds(config: Config) -> float:
    """How often time passes for the Monitor (and the latest state is published)."""
    shortest = min((host.gpu_poll_interval_seconds for host in config.watched_hosts), default=4.0)
    return min(_MAX_TICK_SECONDS, shortest / 4)


def host_plan(host: HostConfig, config: Config) -> HostPlan:
    """What the Monitor needs of a configured host."""
    return HostPlan(
        name=host.name,
        units=tuple(host.units),
        stall_thresholds=host.stall_thresholds(),
        stall_min_growth_bytes=config.defaults.stall_min_growth_bytes,
        probe_policy=host.probe_policy(),
        slow_factor=host.slow_factor,
        slow_floor_seconds=host.slow_floor_seconds,
        same_clock=host.local,
    )


def serve_http(
    config: Config,
    get_snapshot: Callable[[], Snapshot],
    status: Callable[[], Mapping[str, Any]],
) -> ServerHandle:
    """Start the exporter's HTTP server as configured (TLS, basic auth); bind errors raise.

    Raises:
        ConfigError: the web config or TLS files cannot be used (``check-config`` runs the same
            check: ``web_config.load_exporter_security``).
    """
    exporter = config.exporter
    security = load_exporter_security(exporter)
    if security.basic_auth_without_tls:
        _log.warning("basic_auth_without_tls", detail="passwords travel in clear text")
    registry = make_registry(SentinelCollector(get_snapshot))
    users = security.basic_auth_users
    authenticator = BasicAuthenticator(users) if users else None
    app = make_app(registry, status, authenticator=authenticator, snapshot=get_snapshot)
    limits = ConnectionLimits(exporter.max_connections, exporter.request_read_timeout_seconds)
    return start_http_server(
        exporter.listen_host, exporter.listen_port, app, security.ssl_context, limits
    )


@dataclass(slots=True)
class _HostRunner:
    host: HostConfig
    transport: Transport
    follower: JournalFollower
    poller: GpuPoller | None
    prober: HealthProber | None = None
    task: asyncio.Task[None] | None = None
    gpu_down: bool = field(default=False)
    # devices, processes and owners of the last GPU sample queued (an equal reading is not)
    gpu_figures: tuple[object, ...] | None = None
    gpu_repeats: int = 0  # readings equal to gpu_figures not queued since


class Daemon:
    """The long-running monitor.

    Args:
        config: the validated configuration.
        config_path: the file to re-read on SIGHUP (``None``: reload is refused).
        clock: wall clock (UTC).
        listen: ``host:port`` that replaces ``exporter.listen`` of this config and of every
            config reloaded (``run --listen``); ``None`` keeps the config's.
    """

    def __init__(
        self,
        config: Config,
        config_path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        listen: str | None = None,
    ) -> None:
        self._listen = listen
        config = self._with_overrides(config)
        self.config = config
        self._config_path = config_path
        self._clock = clock
        state_directory = _state_directory(config)
        self._cursors = CursorStore(state_directory, wall_clock=clock)
        self.history = HistoryStore(Path(state_directory) / "history")
        self.monitor = Monitor(
            [host_plan(host, config) for host in config.watched_hosts],
            clock=clock,
            cursors=self._cursors,
            history=self.history,
            benign_patterns=config.defaults.benign_patterns,
            traceback_hold_seconds=config.defaults.traceback_hold_seconds,
            forget_unit_after_seconds=config.defaults.forget_unit_after_seconds,
            show_saved_counters=True,
        )
        self.monitor.register_sentinel(self._sentinel_state)
        self._queue: asyncio.Queue[Item] = asyncio.Queue(_QUEUE_SIZE)
        self._runners: dict[str, _HostRunner] = {}
        # per host, from its first start in this run: what an earlier run counted already, and
        # where the backfill must begin to read again the crashes it had not counted yet
        self._history: dict[str, HistoryBoundary] = {}
        self._read_from: dict[str, datetime] = {}
        self._reloads = {"success": 0, "failure": 0}
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()
        self.http: ServerHandle | None = None

    def _with_overrides(self, config: Config) -> Config:
        """``config`` with the command line's ``--listen`` in place of ``exporter.listen``."""
        if self._listen is None or self._listen == config.exporter.listen:
            return config
        exporter = config.exporter.model_copy(update={"listen": self._listen})
        return config.model_copy(update={"exporter": exporter})

    def status(self) -> dict[str, Any]:
        """The ``/status`` document: units (as ``replay --output json``), hosts, collectors.

        Each host also carries ``unit_patterns`` (its configured names and globs) and
        ``units_followed`` (the units those resolved to in its journal, empty until found).
        """
        document = status_document(self.monitor.latest)
        document["version"] = __version__
        document["config"] = self.config.redacted()
        # what each host looks for and finds, so that "no units" can say why (``status``)
        hosts = {host.name: host for host in self.config.watched_hosts}
        runners = dict(self._runners)
        for entry in document["hosts"]:
            if (host := hosts.get(entry["host"])) is not None:
                entry["unit_patterns"] = list(host.units)
            if (runner := runners.get(entry["host"])) is not None:
                entry["units_followed"] = list(runner.follower.units)
        return document

    def request_stop(self) -> None:
        """Ask the daemon to stop (what SIGTERM does)."""
        self._stop.set()

    def _sentinel_state(self) -> SentinelState:
        return SentinelState(
            config_reloads=dict(self._reloads),
            cursor_save_failures_total=self._cursors.failures_total,
            cursor_saved_at=self._cursors.saved_at,
        )

    def _restore(self, host: HostConfig) -> None:
        """Go on from the host's saved state, or start it: a first start counts what is
        written from now on (saved at once, so a daemon killed before its first flush still
        knows where it began)."""
        name = host.name
        if name in self._history:  # removed and added again by reloads: as it was last marked
            marked = self._cursors.marked_state(name)
            if marked is not None:
                self.monitor.restore(name, marked)
            return
        state = self._cursors.load_state(name)
        if state is None:
            state = HostState(None, self._clock())
            self._cursors.mark(name, state)
        self.monitor.restore(name, state)
        self._history[name] = HistoryBoundary(state.cursor, state.since or self._clock())
        starts = [
            crash.started_at or crash.ended_at
            for counters in state.units.values()
            for crash in counters.carried
        ]
        known = [start for start in (*starts, state.read_from) if start is not None]
        if known:
            self._read_from[name] = min(known)

    async def run(self) -> int:
        """Serve until stopped; return the exit status: 0, or 1 when the last cursors and
        counters could not be saved (``cursor_save_failed``).

        Raises:
            StateDirectoryError: the state directory cannot be written, or another daemon
                holds it (``CursorStore.lock``): nothing started.
            ConfigError: the exporter's web config or TLS files cannot be used.
        """
        self._cursors.check_writable()
        self._cursors.lock(lock_name(self.config.shard))  # one daemon per directory and shard
        try:
            return await self._serve()
        finally:
            self._cursors.unlock()

    async def _serve(self) -> int:
        for host in self.config.hosts:
            self._restore(host)
        self._cursors.flush_sync()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._stop.set)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, self._reload.set)
        units = await asyncio.to_thread(self.history.load)
        _log.debug("startup_history_loaded", directory=str(self.history.directory), units=units)
        self.monitor.publish()
        self.http = serve_http(self.config, lambda: self.monitor.latest, self.status)
        _log.info(
            "daemon_started",
            version=__version__,
            listen=f"{self.http.host}:{self.http.port}",
            hosts=[host.name for host in self.config.watched_hosts],
        )
        try:
            async with asyncio.TaskGroup() as group:
                monitor = group.create_task(self.monitor.run(self._queue))
                ticker = group.create_task(self._tick())
                flusher = group.create_task(self._flush_cursors())
                for host in self.config.watched_hosts:
                    self._start_host(host)
                waiter = group.create_task(self._wait_for_stop())
                await waiter
                for task in (monitor, ticker, flusher):
                    task.cancel()
        finally:
            await self._stop_hosts(list(self._runners))
            self.monitor.checkpoint()
            # waits for a periodic flush the cancellation left writing in its thread
            written = await self._cursors.flush()
            await self.history.flush()
            if self.http is not None:
                await asyncio.to_thread(self.http.shutdown)
            unsaved = self._cursors.pending
            if unsaved:
                _log.error(
                    "daemon_stopped_unsaved",
                    directory=str(self._cursors.directory),
                    detail="the last cursors and counters could not be saved: the next start "
                    "reads again, and counts again, what was applied since the last save",
                )
            _log.info(
                "daemon_stopped",
                cursors_written_at_stop=written,  # 0 when the periodic flush had saved them all
                cursors_stored=sum(
                    1 for host in self.config.watched_hosts if self._cursors.load(host.name)
                ),
            )
        return 1 if unsaved else 0

    async def _wait_for_stop(self) -> None:
        while not self._stop.is_set():
            reload_wait = asyncio.ensure_future(self._reload.wait())
            stop_wait = asyncio.ensure_future(self._stop.wait())
            _done, pending = await asyncio.wait(
                {reload_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in pending:
                task.cancel()
            if self._reload.is_set() and not self._stop.is_set():
                self._reload.clear()
                await self.reload()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(tick_interval_seconds(self.config))
            await self._queue.put(Tick(self._clock()))

    async def _flush_cursors(self) -> None:
        interval = self.config.defaults.cursor_flush_interval_seconds
        while True:
            await asyncio.sleep(interval)
            self.monitor.checkpoint()  # cursors with their counters, consistent: same thread
            if await self._cursors.flush():
                await self._queue.put(StateSaved())  # the saved counters may be shown
            await self.history.flush()

    # --- hosts ---------------------------------------------------------------------------

    def _make_runner(self, host: HostConfig) -> _HostRunner:
        settings = effective_ssh_settings(host)
        transport: Transport = (
            LocalTransport(host.name) if settings is None else SshTransport(host.name, settings)
        )
        defaults = self.config.defaults
        follower = JournalFollower(
            host.name,
            transport,
            FollowerSettings(
                units=tuple(host.units),
                journalctl_args=tuple(host.journalctl_args),
                backfill_max_invocations=defaults.backfill_max_invocations,
                backfill_max_age_seconds=defaults.backfill_max_age_seconds,
                backfill_max_records=defaults.backfill_max_records,
                unit_discovery_interval_seconds=defaults.unit_discovery_interval_seconds,
                forget_unit_after_seconds=defaults.forget_unit_after_seconds,
            ),
            # after a reload, the cursor applied in this run (not yet saved) is the newest
            cursor=self.monitor.applied_cursor(host.name) or self._history[host.name].cursor,
            # ... but what counts as history stays what it was at the host's first start
            history=self._history[host.name],
            read_from=self._read_from.pop(host.name, None),
            clock=self._clock,
        )
        reader: GpuReader | None = None
        if host.gpu is GpuBackend.NVML:
            reader = NvmlReader(host=host.name)
        elif host.gpu is GpuBackend.NVIDIA_SMI:
            # two long-lived nvidia-smi -lms streams, not a process and a channel per poll
            reader = NvidiaSmiStreamReader(
                transport,
                interval_seconds=host.gpu_poll_interval_seconds,
                timeout_seconds=_gpu_query_timeout(host),
            )
        poller = (
            GpuPoller(
                host.name,
                reader,
                host.gpu_poll_interval_seconds,
                reader_paced=isinstance(reader, NvidiaSmiStreamReader),
            )
            if reader
            else None
        )
        policy = host.probe_policy()
        prober = (
            HealthProber(
                host.name, transport, policy, lambda: self.monitor.latest, clock=self._clock
            )
            if policy.is_enabled_anywhere
            else None
        )
        return _HostRunner(host, transport, follower, poller, prober)

    def _start_host(self, host: HostConfig) -> None:
        self._restore(host)
        runner = self._make_runner(host)
        self._runners[host.name] = runner
        self.monitor.register_collector(
            host.name, "journal", lambda: runner.follower.state, lambda: runner.follower.skipped
        )
        if runner.poller is not None:
            poller = runner.poller
            self.monitor.register_collector(
                host.name, "gpu", lambda: _gpu_state(runner), poller.skipped
            )
        runner.task = asyncio.create_task(self._supervise(runner), name=f"host-{host.name}")

    async def _supervise(self, runner: _HostRunner) -> None:
        """Run one host's sources forever; a bug restarts the host, never the daemon."""
        name = runner.host.name
        cgroups = CgroupReader(
            None if runner.host.local else runner.transport,
            timeout_seconds=_gpu_query_timeout(runner.host),
        )

        async def emit_gpu(reading: GpuReading) -> None:
            try:
                # read once per new PID, kept while the PID stays (not a command per poll)
                owners = await cgroups.units_of(process.pid for process in reading.processes)
            except GpuCollectorError as error:
                _log.debug("gpu_cgroups_unreadable", host=name, reason=error.reason)
                owners = {}
            figures = (reading.devices, reading.processes, owners)
            if figures == runner.gpu_figures and not runner.gpu_down:
                # the Monitor has these figures: an idle host's reading costs no queue item,
                # but every tenth is sent (journal PIDs may attribute a process meanwhile)
                runner.gpu_repeats += 1
                if runner.gpu_repeats < _GPU_REPEATS_SKIPPED:
                    return
            runner.gpu_down = False
            runner.gpu_figures = figures
            runner.gpu_repeats = 0
            await self._queue.put(GpuSample(name, reading, owners))

        while True:
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(runner.follower.run(self._queue.put))
                    if runner.poller is not None:
                        group.create_task(runner.poller.run(emit_gpu))
                        group.create_task(self._watch_gpu(runner))
                    if runner.prober is not None:
                        group.create_task(runner.prober.run(self._queue.put))
            except asyncio.CancelledError:
                raise
            except Exception:
                _log.exception("host_supervisor_failed", host=name)
                await asyncio.sleep(5.0)

    async def _watch_gpu(self, runner: _HostRunner) -> None:
        """Clear a host's GPU attribution while its GPU collector is down."""
        assert runner.poller is not None
        while True:
            await asyncio.sleep(runner.host.gpu_poll_interval_seconds)
            state = _gpu_state(runner)
            if not state.up and not runner.gpu_down and state.since is not None:
                runner.gpu_down = True
                await self._queue.put(GpuDown(runner.host.name))

    async def _stop_hosts(self, names: list[str]) -> None:
        runners = [self._runners.pop(name) for name in names if name in self._runners]
        tasks = {runner.task for runner in runners if runner.task is not None}
        for task in tasks:
            task.cancel()
        if tasks:
            # asyncio.wait, not wait_for: bounded, and it never swallows our own cancellation
            done, pending = await asyncio.wait(tasks, timeout=_HOST_STOP_SECONDS)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    _log.error("host_stop_failed", host=task.get_name(), exc_info=task.exception())
            for task in pending:
                _log.error("host_stop_timed_out", host=task.get_name(), seconds=_HOST_STOP_SECONDS)
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.transport.close()
            self.monitor.unregister_collectors(runner.host.name)

    # --- reload --------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Re-read the config file; apply it, or keep the old one if it is invalid."""
        if self._config_path is None:
            _log.warning("config_reload_refused", reason="the daemon runs without a config file")
            return False
        try:
            loaded = await asyncio.to_thread(load_config, self._config_path)
            if "hosts" not in loaded.model_fields_set:
                raise ConfigError(
                    f"{self._config_path}: no [[hosts]] table: a reload never falls back to "
                    "watching this machine's default units (an empty or truncated file?)"
                )
            config = self._with_overrides(loaded)
        except ConfigError as error:
            self._reloads["failure"] += 1
            _log.error(
                "config_reload_failed",
                path=str(self._config_path),
                error=str(error),
                detail="the running configuration is kept",
            )
            self.monitor.publish()
            return False
        needs_restart = [
            key
            for key, before, after in (
                ("exporter", self.config.exporter, config.exporter),
                (
                    "defaults.state_directory",
                    self.config.defaults.state_directory,
                    config.defaults.state_directory,
                ),
            )
            if before != after
        ]
        if needs_restart:
            _log.warning(
                "config_reload_partial",
                path=str(self._config_path),
                keys=needs_restart,
                detail="these settings take effect at the next restart",
            )
        old = {host.name: host for host in self.config.watched_hosts}
        new = {host.name: host for host in config.watched_hosts}
        changed = [name for name in old if name not in new or old[name] != new[name]]
        await self._stop_hosts(changed)
        self.monitor.checkpoint()  # the last state of hosts removed is marked, then saved
        self.config = config
        self.monitor.reconfigure(
            [host_plan(host, config) for host in config.watched_hosts],
            config.defaults.benign_patterns,
        )
        added = [host for name, host in new.items() if name not in self._runners]
        for host in added:
            self._restore(host)
        if added:  # a new host's start is saved before it reads: a kill now loses nothing
            await self._cursors.flush()
        for host in added:
            self._start_host(host)
        self._reloads["success"] += 1
        self.monitor.publish()
        _log.info(
            "config_reloaded",
            path=str(self._config_path),
            hosts=sorted(new),
            restarted=sorted(name for name in changed if name in new),
            removed=sorted(name for name in old if name not in new),
        )
        return True


def _gpu_query_timeout(host: HostConfig) -> float:
    """Limit on one GPU query (nvidia-smi, cgroups): slow nvidia-smi is not a dead host.

    A dead host is noticed through its SSH connection (``effective_ssh_settings``), so this
    may be longer than the poll interval without breaking the two-interval bound.
    """
    return max(3.0, 1.5 * host.gpu_poll_interval_seconds)


def _gpu_state(runner: _HostRunner) -> CollectorState:
    """The GPU collector's state, down too while the host's connection is lost."""
    assert runner.poller is not None
    state = runner.poller.state
    journal = runner.follower.state
    if state.up and not journal.up and journal.reason in _UNREACHABLE_REASONS:
        return CollectorState(False, journal.since, journal.reason, state.reconnects_total)
    return state


def _state_directory(config: Config) -> str:
    """The configured state directory; systemd's ``STATE_DIRECTORY`` (``StateDirectory=``)
    when the config leaves the default. Never another one: a daemon that cannot write there
    refuses to start (``Daemon.run``), rather than keep its cursors where the next start would
    not look."""
    directory = config.defaults.state_directory
    from_systemd = os.environ.get("STATE_DIRECTORY")
    if from_systemd and directory == "/var/lib/vllm-sentinel":
        return from_systemd.split(":")[0]
    return directory
