"""The readiness probe: ``GET /health`` of each unit's vLLM API server (edge: asyncio).

One ``HealthProber`` per host reads the Monitor's latest snapshot, and for every unit whose
probe is enabled (``ProbePolicy``) and whose current incarnation is alive, sends
``GET /health`` to where that incarnation's API server listens (``health.probe_target``: the
URL vLLM logged, or the configured port) every ``interval_seconds``, through the host's
``Transport``: locally a TCP (or Unix socket) connection, on an SSH host a ``direct-tcpip``
channel of the host's existing SSH connection. Each result goes onto the Monitor's queue as a
``HealthProbeResult``; the Monitor (the one writer) keeps the state and decides
``unhealthy``.

Cost is bounded: at most one probe in flight per unit, each limited to ``timeout_seconds``
(connect, request and the whole answer; an SSH host's connection is made first, within its
``connect_timeout_seconds``, and no probe starts while the host's journal collector is down),
answers limited to 1 MiB, one connection per probe (``Connection: close``). Once per
incarnation, after ``/health`` first answers 200, the prober also asks ``GET /v1/models`` for
the served model names (``served_models = false`` turns it off). Nothing else is ever sent: no
inference request.

HTTP/1.1 is spoken with ``h11`` (a sans-I/O parser) over ``Transport.open_tcp``'s byte
stream, so the same code runs over a socket and over an SSH channel. HTTPS API servers are not
probed (logged once per incarnation).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import h11
import orjson
import structlog

from vllm_sentinel import __version__
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.health import (
    HealthProbeResult,
    IncarnationKey,
    ProbeOutcome,
    ProbePolicy,
    ProbeSettings,
    ProbeTarget,
    incarnation_key,
    is_probed,
    probe_target,
)
from vllm_sentinel.engine.snapshot import Snapshot
from vllm_sentinel.errors import TransportError
from vllm_sentinel.sources.transport import ByteStream, Transport

__all__ = ["HealthProber", "HttpAnswer", "ProbeError", "http_get", "probe_once"]

_MAX_BODY_BYTES = 1 << 20
_MAX_MODELS = 32
_MAX_MODEL_NAME = 256
_USER_AGENT = f"vllm-sentinel/{__version__} (readiness probe)"
_UNREACHABLE = frozenset({"forwarding_refused", "host_unreachable"})
_log = structlog.get_logger("vllm_sentinel.sources.health_probe")


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A whole HTTP answer: its status code and body (at most 1 MiB)."""

    status: int
    body: bytes


class ProbeError(Exception):
    """A probe got no whole answer; ``error`` is one of ``health.PROBE_ERRORS``."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(f"{error}: {detail}" if detail else error)
        self.error = error
        self.detail = detail


async def http_get(stream: ByteStream, host: str, path: str) -> HttpAnswer:
    """Send ``GET path`` on ``stream`` and read the whole answer (the caller times it out).

    Raises:
        ProbeError: ``connection_reset`` (closed or reset before a whole answer),
            ``bad_response`` (not HTTP/1.1, or a body over 1 MiB).
    """
    connection = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=path,
        headers=[
            ("Host", host),
            ("User-Agent", _USER_AGENT),
            ("Accept", "application/json, */*"),
            ("Connection", "close"),
        ],
    )
    try:
        await stream.write(connection.send(request) + (connection.send(h11.EndOfMessage()) or b""))
    except ConnectionResetError as error:
        raise ProbeError("connection_reset", str(error)) from error
    status: int | None = None
    body = bytearray()
    ended = False
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as error:
            raise ProbeError("connection_reset" if ended else "bad_response", str(error)) from None
        if event is h11.NEED_DATA:
            try:
                chunk = await stream.read()
            except ConnectionResetError as error:
                raise ProbeError("connection_reset", str(error)) from error
            ended = not chunk
            connection.receive_data(chunk)
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > _MAX_BODY_BYTES:
                raise ProbeError("bad_response", f"body over {_MAX_BODY_BYTES} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert status is not None
            return HttpAnswer(status, bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            raise ProbeError("connection_reset", "closed before an answer")


async def _get(transport: Transport, target: ProbeTarget, path: str) -> HttpAnswer:
    """One GET on a new connection to ``target`` (the caller times it out)."""
    try:
        if target.path:
            stream = await transport.open_unix(target.path)
        else:
            stream = await transport.open_tcp(target.address, target.port)
    except TransportError as error:
        reason = error.reason
        if reason not in ("connection_refused", "connect_failed", "forwarding_refused"):
            reason = "host_unreachable"  # the SSH connection itself, not vLLM
        raise ProbeError(reason, error.detail) from error
    try:
        host = "localhost" if target.path else _host_header(target)
        return await http_get(stream, host, path)
    finally:
        await stream.aclose()


def _host_header(target: ProbeTarget) -> str:
    address = f"[{target.address}]" if ":" in target.address else target.address
    return f"{address}:{target.port}"


def _served_models(answer: HttpAnswer) -> tuple[str, ...] | None:
    """Model ids of an OpenAI ``/v1/models`` list, or ``None`` when the answer is not one."""
    if answer.status != 200:
        return None
    try:
        document = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        return None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        return None
    names = [item.get("id") for item in data if isinstance(item, dict)]
    return tuple(name[:_MAX_MODEL_NAME] for name in names if isinstance(name, str))[:_MAX_MODELS]


async def probe_once(
    transport: Transport,
    target: ProbeTarget,
    timeout_seconds: float,
    *,
    served_models: bool = False,
) -> tuple[ProbeOutcome, str, int | None, float, tuple[str, ...] | None]:
    """Probe ``/health`` once (and ``/v1/models`` after a 200 when asked).

    Returns:
        ``(outcome, error, status, duration_seconds, served models or None)``; ``error`` is
        one of ``health.PROBE_ERRORS``. The host's connection is made (or found up) before
        the timeout starts; when it cannot be, the probe is ``unreachable``. ``/v1/models``
        gets its own ``timeout_seconds`` and its failure only leaves the models unknown (it
        needs the API key where one is set; ``/health`` never does).
    """
    try:
        # the host's connection first, on its own bound: a slow or dead SSH peer is not vLLM
        await transport.connect()
    except TransportError as error:
        _log.debug("health_probe_host_unreachable", host=transport.host, reason=error.reason)
        return ProbeOutcome.UNREACHABLE, "host_unreachable", None, 0.0, None
    started = time.monotonic()
    status: int | None = None
    try:
        async with asyncio.timeout(timeout_seconds):
            answer = await _get(transport, target, "/health")
        status = answer.status
    except TimeoutError:
        return ProbeOutcome.DOWN, "timeout", None, time.monotonic() - started, None
    except ProbeError as failure:
        outcome = ProbeOutcome.UNREACHABLE if failure.error in _UNREACHABLE else ProbeOutcome.DOWN
        return outcome, failure.error, None, time.monotonic() - started, None
    duration = time.monotonic() - started
    if status != 200:
        return ProbeOutcome.DOWN, "http_status", status, duration, None
    models: tuple[str, ...] | None = None
    if served_models:
        with contextlib.suppress(TimeoutError, ProbeError):
            async with asyncio.timeout(timeout_seconds):
                models = _served_models(await _get(transport, target, "/v1/models"))
    return ProbeOutcome.UP, "", status, duration, models


class HealthProber:
    """Probes the units of one host, at most one probe in flight per unit.

    Args:
        host: the host's name (as in the snapshot).
        transport: the host's transport (its SSH connection is shared, not duplicated).
        policy: which units to probe, where, how often.
        get_snapshot: the Monitor's latest snapshot (read only).
        clock: wall clock (UTC) for the results' times.
    """

    def __init__(
        self,
        host: str,
        transport: Transport,
        policy: ProbePolicy,
        get_snapshot: Callable[[], Snapshot],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.host = host
        self._transport = transport
        self._policy = policy
        self._get_snapshot = get_snapshot
        self._clock = clock
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._next_due: dict[str, float] = {}
        self._models_known: dict[str, IncarnationKey] = {}
        self._last_error: dict[str, str] = {}  # unit → last logged error ("" when up)
        self._untargeted: dict[str, IncarnationKey] = {}
        self.probes_total = 0

    @property
    def in_flight(self) -> int:
        """Probes running now."""
        return sum(1 for task in self._in_flight.values() if not task.done())

    async def run(self, emit: Callable[[HealthProbeResult], Awaitable[None]]) -> None:
        """Probe due units until cancelled; results go to ``emit`` (the Monitor's queue)."""
        intervals = [self._policy.default.interval_seconds]
        intervals += [settings.interval_seconds for _, settings in self._policy.units]
        wake = max(0.05, min(1.0, min(intervals) / 4))
        try:
            while True:
                self.start_due(emit)
                await asyncio.sleep(wake)
        finally:
            tasks = [task for task in self._in_flight.values() if not task.done()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def start_due(self, emit: Callable[[HealthProbeResult], Awaitable[None]]) -> int:
        """Start the probes that are due now (``run`` calls it); return how many started."""
        host = next((item for item in self._get_snapshot().hosts if item.host == self.host), None)
        if host is None:
            return 0
        journal = host.collectors.get("journal")
        if journal is not None and not journal.up:
            return 0  # the host's state is the last known; over SSH it may be unreachable
        started = 0
        now = time.monotonic()
        for unit in host.units:
            settings = self._policy.for_unit(unit.unit)
            current = unit.current
            if not settings.enabled or current is None or not is_probed(current):
                continue
            task = self._in_flight.get(unit.unit)
            if (task is not None and not task.done()) or now < self._next_due.get(unit.unit, 0):
                continue
            key = incarnation_key(current)
            target = probe_target(current.api_url, settings.port)
            if target is None:
                # normal while starting (the port is logged later); worth a line once ready
                if current.phase is Phase.READY and self._untargeted.get(unit.unit) != key:
                    self._untargeted[unit.unit] = key
                    _log.info(
                        "health_probe_no_target",
                        host=self.host,
                        unit=unit.unit,
                        api_url=current.api_url,
                        detail="vLLM logged no port (or an https URL) and none is configured",
                    )
                continue
            self._next_due[unit.unit] = now + settings.interval_seconds
            self._in_flight[unit.unit] = asyncio.create_task(
                self._probe(unit.unit, key, target, settings, emit, self._clock()),
                name=f"probe-{self.host}-{unit.unit}",
            )
            started += 1
        return started

    async def _probe(
        self,
        unit: str,
        key: IncarnationKey,
        target: ProbeTarget,
        settings: ProbeSettings,
        emit: Callable[[HealthProbeResult], Awaitable[None]],
        at: datetime,
    ) -> None:
        """Probe once; ``at`` is when the probe was started (due), not when its task ran."""
        wants_models = settings.served_models and self._models_known.get(unit) != key
        outcome, error, status, duration, models = await probe_once(
            self._transport, target, settings.timeout_seconds, served_models=wants_models
        )
        self.probes_total += 1
        if wants_models and outcome is ProbeOutcome.UP:
            self._models_known[unit] = key  # asked once per incarnation, answered or not
        self._log_change(unit, target, error, status)
        await emit(
            HealthProbeResult(
                host=self.host,
                unit=unit,
                incarnation=key,
                at=at,
                duration_seconds=duration,
                outcome=outcome,
                error=error,
                status=status,
                url=target.url,
                served_models=models,
            )
        )

    def _log_change(self, unit: str, target: ProbeTarget, error: str, status: int | None) -> None:
        """One log line when a unit's probe starts failing, changes error, or recovers."""
        before = self._last_error.get(unit)
        if before == error:
            return
        self._last_error[unit] = error
        if not error:
            if before is not None:
                _log.info("health_probe_recovered", host=self.host, unit=unit, url=target.url)
            return
        log = _log.warning if error == "forwarding_refused" else _log.info
        log(
            "health_probe_failed",
            host=self.host,
            unit=unit,
            url=target.url,
            reason=error,
            status=status,
        )
