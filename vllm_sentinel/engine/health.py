"""Readiness probing: where a unit's API server listens, probe results, the unhealthy rule
(core: pure).

The probe itself (an HTTP ``GET /health`` over TCP, or through the host's SSH connection) is an
edge, ``probe.py``; everything it decides with lives here, without I/O or a clock:

* **Where to probe.** ``api_url_from_args`` reads the listen address from the arguments vLLM
  logs at start (``args: Namespace(host=None, port=8000, …)`` 0.4.3–0.8.5,
  ``non-default args: {'port': 8001, …}`` 0.9.0+, where a missing ``port`` is vLLM's default
  8000, from ``vllm/entrypoints/openai/cli_args.py``); the tracker replaces it with the URL of
  the API server's own start line when that comes (``Starting vLLM API server on URL``
  0.7.3+, uvicorn's ``Uvicorn running on URL`` ≤0.7.0; ``markers.py`` rows with a ``url``
  group). ``probe_target`` turns that URL (or a configured port) into an address to connect
  to: a wildcard bind (``0.0.0.0``, ``::``) is probed on loopback.
* **What a probe said.** ``HealthProbeResult``: ``up`` (``/health`` answered 200), ``down``
  (another status, refused, reset, timed out: the server is not serving) or ``unreachable``
  (the host itself could not be reached, e.g. its SSH connection is down: nothing is learnt
  about vLLM).
* **The unit's health.** ``HealthTracker`` keeps one incarnation's probe history and
  ``UnitHealth`` is its frozen view. A unit is **unhealthy** when its logs (or an earlier
  successful probe) say it is ready but every probe for at least ``unhealthy_after_seconds``
  failed: failures while the unit is still starting do not count, a success clears it.
* **Ready before the logs say so.** ``with_probe_readiness`` shows a unit whose ``/health``
  answered 200 while its logs are still in a startup phase (journald or the SSH stream lag,
  or vLLM logging at WARNING) as ``ready`` from the probe's time, the probe being the
  evidence (``UnitSnapshot.ready_source == "health_probe"``). It only ever applies to a live
  incarnation: a crash or stop in the logs ends it, whatever the probe said.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Outcome, Phase
from vllm_sentinel.engine.snapshot import IncarnationSnapshot, PhaseEntry, UnitHealth, UnitSnapshot

__all__ = [
    "DEFAULT_VLLM_PORT",
    "PROBE_ERRORS",
    "HealthProbeResult",
    "HealthTracker",
    "IncarnationKey",
    "ProbeOutcome",
    "ProbePolicy",
    "ProbeSettings",
    "ProbeTarget",
    "api_url_from_args",
    "incarnation_key",
    "is_probed",
    "probe_target",
    "with_probe_readiness",
]

DEFAULT_VLLM_PORT = 8000
"""``vllm serve``'s default ``--port`` (``vllm/entrypoints/openai/cli_args.py``, all releases)."""

PROBE_ERRORS: tuple[str, ...] = (
    "",
    "http_status",
    "timeout",
    "connection_refused",
    "connect_failed",
    "connection_reset",
    "bad_response",
    "forwarding_refused",
    "host_unreachable",
)
"""Why a probe failed, a bounded set (``""`` when ``/health`` answered 200):

``http_status`` another status than 200 (``status`` says which; vLLM answers 503 while its
engine is dead), ``timeout`` no whole answer within the timeout (a socket bound but not yet
served, a hung server), ``connection_refused`` nothing listens there, ``connect_failed``
another connect error (no route), ``connection_reset`` the connection was closed before a whole
answer, ``bad_response`` not HTTP/1.1, ``forwarding_refused`` the SSH server refused to forward
(``AllowTcpForwarding no``), ``host_unreachable`` the host itself (its SSH connection) is down.
The last two say nothing about vLLM: such a probe is ``unreachable``, not ``down``.
"""

IncarnationKey = tuple[str | None, datetime | None]
"""An incarnation's identity: its systemd invocation id and its start time."""

_WILDCARDS: Mapping[str, str] = MappingProxyType(
    {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}  # noqa: S104 (parsed)
)
_URL = re.compile(
    r"^(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]*\]|[A-Za-z0-9_.-]*)(?::(?P<port>\d{1,5}))?"
    r"(?:/\S*)?$"
)
_UNIX_URL = re.compile(r"^unix:(?P<path>/\S+)$")
# ``Namespace(host=None, port=8000`` (0.4.3–0.8.5), ``{'host': '0.0.0.0', 'port': 8001`` (0.9.0+)
_ARG_PORT = re.compile(r"(?:(?<![\w-])--port[= ]|(?<![\w'])port=|'port': ?)(\d{1,5})\b")
_ARG_HOST = re.compile(r"(?:(?<![\w-])--host[= ]|(?<![\w'])host=|'host': ?)'?([^',)\s}]*)'?")
_ARG_UDS = re.compile(r"(?:(?<![\w'])uds=|'uds': ?)'([^']+)'")
_NON_DEFAULT_ARGS = "non-default args:"


def api_url_from_args(body: str) -> str | None:
    """The URL the API server will listen on, from a logged argument line, or ``None``.

    Args:
        body: a line body (``args: Namespace(...)``, ``non-default args: {...}``).

    Returns:
        ``http://HOST:PORT`` (``HOST`` ``0.0.0.0`` for ``None``/unset), ``unix:/path`` for
        ``--uds``, or ``None`` when the line names no port and is not vLLM's
        ``non-default args`` line (where an absent ``port`` is the default 8000).
    """
    uds = _ARG_UDS.search(body)
    if uds is not None:
        return f"unix:{uds.group(1)}"
    port_match = _ARG_PORT.search(body)
    if port_match is not None:
        port = int(port_match.group(1))
    elif body.startswith(_NON_DEFAULT_ARGS):
        port = DEFAULT_VLLM_PORT
    else:
        return None
    if not 1 <= port <= 65535:
        return None
    host_match = _ARG_HOST.search(body)
    host = host_match.group(1) if host_match is not None else ""
    if host in ("None", ""):
        host = "0.0.0.0"  # noqa: S104 (what vLLM binds when --host is unset)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """Where to send ``GET /health``: a TCP address, or a Unix socket path.

    Attributes:
        address: host name or IP to connect to (on the unit's host: over SSH, the remote end
            resolves it), ``""`` for a Unix socket.
        port: TCP port, 0 for a Unix socket.
        path: the Unix socket path, ``""`` for TCP.
        url: the base URL shown to people (``http://127.0.0.1:8000``, ``unix:/run/vllm.sock``).
    """

    address: str
    port: int
    path: str = ""
    url: str = ""


def probe_target(api_url: str | None, port: int | None = None) -> ProbeTarget | None:
    """Resolve where to probe a unit.

    Args:
        api_url: the incarnation's API URL from its logs (``IncarnationSnapshot.api_url``).
        port: a configured port; when set it wins over the logged one (a container's published
            port differs from the one vLLM logs inside it), on the logged address or loopback.

    Returns:
        The target, or ``None`` when neither gives a port, or the URL is HTTPS (the probe
        speaks plain HTTP only) or unreadable.
    """
    host = "127.0.0.1"
    logged_port: int | None = None
    if api_url:
        unix = _UNIX_URL.match(api_url)
        if unix is not None and port is None:
            return ProbeTarget("", 0, unix.group("path"), api_url)
        found = _URL.match(api_url)
        if found is not None:
            if found.group("scheme") == "https" and port is None:
                return None
            host = _WILDCARDS.get(found.group("host"), found.group("host")) or host
            logged_port = int(found.group("port")) if found.group("port") else 80
    chosen = port if port is not None else logged_port
    if chosen is None or not 1 <= chosen <= 65535:
        return None
    address = host[1:-1] if host.startswith("[") else host
    shown = f"[{address}]" if ":" in address else address
    return ProbeTarget(address, chosen, "", f"http://{shown}:{chosen}")


# --- settings ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """How one unit is probed (the config's ``health_probe`` tables, resolved).

    Attributes:
        enabled: probe this unit at all.
        port: probe this port instead of the one vLLM logs (``None``: from the logs).
        interval_seconds: seconds between the starts of two probes of the unit.
        timeout_seconds: limit on one probe: connect, request, whole answer.
        unhealthy_after_seconds: a ready unit whose probes all failed this long is unhealthy.
        served_models: also ask ``GET /v1/models`` once per incarnation, for the served names.
    """

    enabled: bool = False
    port: int | None = None
    interval_seconds: float = 10.0
    timeout_seconds: float = 5.0
    unhealthy_after_seconds: float = 60.0
    served_models: bool = True


@dataclass(frozen=True, slots=True)
class ProbePolicy:
    """A host's probe settings, with per-unit overrides (first matching name or glob wins)."""

    default: ProbeSettings = field(default_factory=ProbeSettings)
    units: tuple[tuple[str, ProbeSettings], ...] = ()

    def for_unit(self, unit: str) -> ProbeSettings:
        """The settings in effect for ``unit``."""
        for pattern, settings in self.units:
            if pattern == unit or fnmatch.fnmatchcase(unit, pattern):
                return settings
        return self.default

    @property
    def is_enabled_anywhere(self) -> bool:
        """True when some unit of the host may be probed."""
        return self.default.enabled or any(settings.enabled for _, settings in self.units)


# --- results and state ---------------------------------------------------------------------


class ProbeOutcome(StrEnum):
    """What one probe learnt."""

    UP = "up"  # /health answered 200
    DOWN = "down"  # the server did not serve: another status, refused, reset, timed out
    UNREACHABLE = "unreachable"  # the host could not be reached: nothing learnt about vLLM


@dataclass(frozen=True, slots=True)
class HealthProbeResult:
    """One probe of one unit, as the prober puts it on the Monitor's queue.

    Attributes:
        host, unit: which unit.
        incarnation: the incarnation the probe was started for (``incarnation_key``).
        at: when the probe started (daemon clock, UTC).
        duration_seconds: how long it took, up to the timeout.
        outcome: up, down or unreachable.
        error: from ``PROBE_ERRORS``.
        status: the HTTP status of ``/health``, if one came.
        url: the base URL probed.
        served_models: model ids ``/v1/models`` listed (``None``: not asked or no answer).
    """

    host: str
    unit: str
    incarnation: IncarnationKey
    at: datetime
    duration_seconds: float
    outcome: ProbeOutcome
    error: str = ""
    status: int | None = None
    url: str = ""
    served_models: tuple[str, ...] | None = None


def incarnation_key(incarnation: IncarnationSnapshot) -> IncarnationKey:
    """The identity a probe result is tied to."""
    return (incarnation.id, incarnation.started_at)


def is_probed(incarnation: IncarnationSnapshot | None) -> bool:
    """True when the incarnation is alive and not shutting down (worth probing)."""
    return (
        incarnation is not None
        and incarnation.outcome in (Outcome.RUNNING, Outcome.READY)
        and incarnation.phase not in (Phase.STOPPING, Phase.STOPPED, Phase.CRASHED)
    )


class HealthTracker:
    """The probe history of one incarnation of one unit (mutable; owned by the Monitor)."""

    def __init__(self, incarnation: IncarnationKey) -> None:
        self.incarnation = incarnation
        self._url = ""
        self._up: bool | None = None
        self._error = ""
        self._status: int | None = None
        self._last_probe_at: datetime | None = None
        self._duration: float | None = None
        self._last_success_at: datetime | None = None
        self._ready_at: datetime | None = None
        self._failing_since: datetime | None = None
        self._failures = 0
        self._served_models: tuple[str, ...] = ()

    @property
    def failing_since(self) -> datetime | None:
        """When the probes started failing while the unit was ready (``None``: not failing)."""
        return self._failing_since

    def apply(self, result: HealthProbeResult, is_ready: bool) -> None:
        """Take one result of this incarnation.

        Args:
            result: the probe's result.
            is_ready: the unit's logs say ready (an earlier success counts as ready too).
        """
        self._url = result.url or self._url
        self._last_probe_at = result.at
        self._duration = result.duration_seconds
        self._error = result.error
        self._status = result.status
        if result.served_models is not None:
            self._served_models = result.served_models
        if result.outcome is ProbeOutcome.UNREACHABLE:
            self._up = None  # nothing learnt: the failing clock neither starts nor stops
            return
        if result.outcome is ProbeOutcome.UP:
            self._up = True
            self._last_success_at = result.at
            if self._ready_at is None:
                self._ready_at = result.at
            self._failing_since = None
            self._failures = 0
            return
        self._up = False
        if not (is_ready or self._ready_at is not None):
            self._failing_since = None  # still starting: failures are expected
            self._failures = 0
            return
        if self._failing_since is None:
            self._failing_since = result.at
        self._failures += 1

    def is_unhealthy(self, now: datetime, unhealthy_after_seconds: float) -> bool:
        """The unhealthy rule at ``now``."""
        since = self._failing_since
        return since is not None and (now - since).total_seconds() >= unhealthy_after_seconds

    def snapshot(self, now: datetime, unhealthy_after_seconds: float) -> UnitHealth:
        """Freeze what the probes say at ``now``."""
        return UnitHealth(
            url=self._url,
            up=self._up,
            error=self._error,
            status=self._status,
            last_probe_at=self._last_probe_at,
            duration_seconds=self._duration,
            last_success_at=self._last_success_at,
            ready_at=self._ready_at,
            failing_since=self._failing_since,
            failures=self._failures,
            unhealthy=self.is_unhealthy(now, unhealthy_after_seconds),
            served_models=self._served_models,
        )


_STARTUP = frozenset(STARTUP_PHASES)


def with_probe_readiness(unit: UnitSnapshot, health: UnitHealth | None) -> UnitSnapshot:
    """The unit with its probe state, shown ready from the probe's time if the logs lag.

    Args:
        unit: the unit as its logs say (tracker snapshot, decorated by the Monitor).
        health: the probes of its current incarnation, or ``None`` when it is not probed.

    Returns:
        ``unit`` with ``health`` set (never ``unhealthy`` while ``sleeping``), and
        ``ready_source`` ``"log"`` when the logs say ready;
        when only a probe does (``/health`` answered 200 while the logs are still in a startup
        phase), the current incarnation gets a ``ready`` phase entered at the probe's time,
        outcome ``ready``, ``ready_source`` ``"health_probe"`` and ``stalled`` False. An
        ended incarnation is never changed: its logs have the last word.
    """
    current = unit.current
    if current is None:
        return unit
    if current.phase is Phase.SLEEPING and health is not None and health.unhealthy:
        # a sleeping server (vLLM sleep mode) that fails /health is asleep, not unhealthy
        health = replace(health, unhealthy=False)
    if current.phase is Phase.READY or current.outcome is Outcome.READY:
        return replace(unit, health=health, ready_source="log")
    ready_at = health.ready_at if health is not None else None
    if ready_at is None or current.outcome is not Outcome.RUNNING or current.phase not in _STARTUP:
        return replace(unit, health=health, ready_source=None) if health is not None else unit
    ready = replace(
        current,
        phase=Phase.READY,
        furthest_phase=Phase.READY,
        outcome=Outcome.READY,
        phases=(*current.phases, PhaseEntry(Phase.READY, ready_at)),
    )
    return replace(
        unit,
        incarnations=(*unit.incarnations[:-1], ready),
        health=health,
        ready_source="health_probe",
        stalled=False,
    )
