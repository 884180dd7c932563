"""``vllm-sentinel watch``: follow units from their current incarnation until a state is reached
(command: wiring at the top, like ``daemon`` and ``replay``).

No second implementation: the journal is read by ``sources.journal.JournalFollower`` (the
backfill of the unit's last two starts, then the follow stream), GPU memory by
``sources.gpu.GpuPoller`` (NVML here, ``nvidia-smi`` streams over SSH), and every item goes
through the daemon's ``monitor.Monitor`` — the same ``TrackerSet``/``UnitTracker``, the same
publish-time judgements (stalled, slower than usual, the ETA from the daemon's startup history
in ``state.history_store``), the same hints (``engine.hints``) and words
(``engine.report``). What is new here is only what a person at the host or a script needs:

* ``WatchJudge`` turns successive snapshots into events (``WatchEvent``): which incarnation
  is followed, its phase changes, progress (at most every ``progress_interval_seconds``), slow,
  stalled, crashed (cause and hint), ready, and the verdict with its exit status;
* three outputs: ``LiveOutput`` (one block redrawn in place on a terminal), ``LineOutput``
  (plain lines, one per event, when piped) and ``JsonOutput`` (NDJSON, one event per line);
* ``run_watch``: the event loop around them.

**Which incarnation is followed.** A unit's newest incarnation when it is still running
(starting, or ready); when it has ended (a crash, a stop: ``systemctl restart`` may not have
started the next one yet), the next one to start. The lines of an ended incarnation are never
counted for the followed one (the tracker's routing by invocation id). When the incarnation
before the followed one crashed, its cause and fix hint are shown.

**Exit statuses** (``EXIT_*``, the contract ``--help`` and docs/watch.md state): 0 every unit
reached the ``--until`` state; 1 a followed incarnation crashed (cause and hint on stderr, one
line each); 3 one stalled (the daemon's stall rule); 4 the ``--timeout`` ran out; 2 bad usage,
or the journal cannot be read (connection, host key, journalctl failing).

Log text is untrusted: what reaches a terminal has its control characters replaced
(``printable``), and JSON is escaped by orjson.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

import orjson

from vllm_sentinel.engine.catalog.phases import PHASE_ORDER, STARTUP_PHASES, Outcome, Phase
from vllm_sentinel.engine.hints import hint_context, hint_for
from vllm_sentinel.engine.report import eta_text, format_duration, iso_utc
from vllm_sentinel.engine.snapshot import (
    CrashInfo,
    GpuReading,
    HostSnapshot,
    IncarnationSnapshot,
    Snapshot,
    UnitSnapshot,
)
from vllm_sentinel.engine.terminal_text import json_for_terminal, printable_values, shortened
from vllm_sentinel.errors import GpuCollectorError, TransportError
from vllm_sentinel.monitor import GpuSample, HostPlan, Monitor, Tick
from vllm_sentinel.sources.gpu import (
    CgroupReader,
    GpuPoller,
    GpuReader,
    NvidiaSmiStreamReader,
    NvmlReader,
)
from vllm_sentinel.sources.journal import (
    FollowerSettings,
    JournalBatch,
    JournalFollower,
    build_journalctl_argv,
)
from vllm_sentinel.sources.transport import Transport
from vllm_sentinel.state.history_store import HistoryStore

__all__ = [
    "EXIT_CRASHED",
    "EXIT_REACHED",
    "EXIT_STALLED",
    "EXIT_TIMED_OUT",
    "EXIT_UNREADABLE",
    "UNTIL_CHOICES",
    "JsonOutput",
    "LineOutput",
    "LiveOutput",
    "Until",
    "Verdict",
    "WatchEvent",
    "WatchJudge",
    "WatchOutput",
    "WatchTarget",
    "event_text",
    "journal_host",
    "parse_duration",
    "parse_until",
    "printable",
    "run_watch",
]

EXIT_REACHED = 0
"""Every unit reached the ``--until`` state."""
EXIT_CRASHED = 1
"""A followed incarnation crashed (cause and hint on stderr)."""
EXIT_UNREADABLE = 2
"""Bad usage, or the journal could not be read (as every command's usage errors)."""
EXIT_STALLED = 3
"""A followed incarnation stalled (the daemon's stall rule)."""
EXIT_TIMED_OUT = 4
"""``--timeout`` ran out first."""

UNTIL_CHOICES = ("ready", "settled")
"""``--until`` words besides a phase name: ``ready``, or ``settled`` (ready, or ended)."""

SETTLE_SECONDS = 5.0
"""Log seconds a crash of a followed incarnation waits for late lines (its root cause may be
refined by a traceback journald delivers after systemd's verdict) before the watch says it;
the daemon waits 30 s because it counts, the watch only tells."""

TRACEBACK_HOLD_SECONDS = 30.0
"""The longest a crash whose traceback is still being printed waits for it (the daemon: 300 s)."""

TICK_SECONDS = 0.5
"""How often time passes for the Monitor (settling, stall, time in phase on the live view)."""

PROGRESS_INTERVAL_SECONDS = 3.0
"""The least time between two ``progress`` events of one unit."""

_PREFLIGHT_TIMEOUT_SECONDS = 30.0
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def printable(text: str) -> str:
    """``text`` with every control character (ANSI escapes, ``\\r``, newlines) as ``?``: log
    text never becomes a terminal escape."""
    return _CONTROL.sub("?", text)


def parse_duration(text: str) -> float:
    """``90`` or ``90s`` → 90.0; ``5m`` → 300.0; ``1h30m`` → 5400.0 (seconds).

    Raises:
        ValueError: not that form, or zero.
    """
    found = _DURATION.fullmatch(text.strip())
    if not text.strip() or found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration (write 90s, 5m or 1h30m)")
    hours, minutes, seconds = (float(part) if part else 0.0 for part in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r}: a timeout must be more than 0 s")
    return total


@dataclass(frozen=True, slots=True)
class Until:
    """The state that ends a watch with status 0: ``ready``, ``settled`` (ready, or ended
    cleanly), or a phase (reached, or any phase after it)."""

    word: str
    phase: Phase | None = None

    def is_reached(self, incarnation: IncarnationSnapshot) -> bool:
        """Whether ``incarnation`` is in (or past) this state."""
        if self.word == "settled":
            return incarnation.outcome is not Outcome.RUNNING
        target = Phase.READY if self.phase is None else self.phase
        if incarnation.furthest_phase in (Phase.STOPPED, Phase.CRASHED):
            return False
        return PHASE_ORDER.index(incarnation.furthest_phase) >= PHASE_ORDER.index(target)


def parse_until(text: str) -> Until:
    """``ready``, ``settled`` or a phase name (``loading_weights``) → ``Until``.

    Raises:
        ValueError: none of those (the message lists them).
    """
    if text in UNTIL_CHOICES:
        return Until(text)
    phases = [phase.value for phase in (*STARTUP_PHASES, Phase.READY)]
    if text in phases:
        return Until(text, Phase(text))
    raise ValueError(f"{text!r} is not one of: {', '.join((*UNTIL_CHOICES, *phases[:-1]))}")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """Something a person or a script following the unit wants to know.

    Attributes:
        event: ``waiting``, ``following``, ``previous_crash``, ``phase``, ``progress``,
            ``slow``, ``stalled``, ``crashed``, ``stopped``, ``ready``, ``reached``,
            ``timed_out``.
        host, unit: whose.
        at: when it was seen (the watch's clock, UTC).
        fields: the event's values (JSON-ready: strings, numbers, lists, dicts).
    """

    event: str
    host: str
    unit: str
    at: datetime
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The NDJSON object: ``event``, ``at``, ``host``, ``unit``, then the fields."""
        return {
            "event": self.event,
            "at": iso_utc(self.at),
            "host": self.host,
            "unit": self.unit,
            **self.fields,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the watch ends: its exit status and the lines for stderr (one each)."""

    status: int
    lines: tuple[str, ...] = ()


@dataclass(slots=True)
class _Followed:
    """What the judge keeps of one unit between two snapshots."""

    ident: tuple[str | None, datetime | None] | None = None  # the followed incarnation
    ended_ident: tuple[str | None, datetime | None] | None = None  # ended before we followed
    phase: Phase | None = None
    phases_seen: int | None = None  # phase entries of the followed incarnation reported
    waiting_said: bool = False
    slow: bool = False
    progress_key: tuple[object, ...] | None = None
    progress_at: float | None = None
    gpu_start_bytes: int | None = None
    done: bool = False  # reached the --until state


def _ident(item: IncarnationSnapshot) -> tuple[str | None, datetime | None]:
    return (item.id, item.started_at)


def _crash_fields(
    crash: CrashInfo, unit: UnitSnapshot, host: HostSnapshot | None, runbook: str | None
) -> dict[str, Any]:
    hint = hint_for(
        crash,
        hint_context(unit, host.gpu_processes if host else (), host.gpus if host else ()),
    )
    return {
        "invocation_id": crash.invocation_id,
        "cause": crash.cause.value,
        "phase": crash.phase.value,
        "exception": crash.exception,
        "message": crash.message,
        "crashed_at": iso_utc(crash.at),
        "hint": hint.text,
        "runbook": f"{runbook}#{hint.cause}" if runbook else hint.runbook,
    }


def _progress(item: IncarnationSnapshot) -> dict[str, Any]:
    progress = item.progress
    out: dict[str, Any] = {}
    if progress.weights_shards_total:
        out["shards_loaded"] = progress.weights_shards_loaded or 0
        out["shards_total"] = progress.weights_shards_total
    bar = progress.bar
    if bar is not None and bar.phase is item.phase:
        out["bar"] = {
            "done": bar.done,
            "total": bar.total,
            "remaining_seconds": bar.remaining_seconds,
        }
    return out


def _eta(unit: UnitSnapshot) -> dict[str, Any] | None:
    if unit.eta_basis is None:
        return None
    return {
        "seconds": unit.eta_seconds,
        "overdue_seconds": unit.eta_overdue_seconds,
        "expected_ready_at": iso_utc(unit.expected_ready_at),
        "basis": unit.eta_basis.value,
        "text": eta_text(
            unit.eta_seconds,
            iso_utc(unit.expected_ready_at),
            unit.eta_basis.value,
            unit.eta_overdue_seconds,
        ),
    }


class WatchJudge:
    """Turns the Monitor's successive snapshots of one host into ``WatchEvent``s and decides
    when the watch ends (``verdict``).

    Args:
        host: the host's name as the Monitor knows it.
        units: the units followed (full names).
        until: the state that ends the watch with status 0 once every unit is in it.
        progress_interval_seconds: the least time between two ``progress`` events of a unit.
        monotonic: a monotonic clock in seconds (progress pacing).
        runbook: the runbook file hints link into (``#<cause>`` appended; the copy the
            package installed); ``None``: the hints' own links (the daemon's ``/runbook``).
    """

    def __init__(
        self,
        host: str,
        units: Sequence[str],
        until: Until,
        *,
        progress_interval_seconds: float = PROGRESS_INTERVAL_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        runbook: str | None = None,
    ) -> None:
        self.host = host
        self.runbook = runbook
        self.units = tuple(units)
        self.until = until
        self._interval = progress_interval_seconds
        self._monotonic = monotonic
        self._state = {unit: _Followed() for unit in self.units}
        self.verdict: Verdict | None = None

    def followed(self, unit: UnitSnapshot) -> IncarnationSnapshot | None:
        """The incarnation of ``unit`` the watch follows now (``None``: waiting for one)."""
        state = self._state.get(unit.unit)
        if state is None or state.ident is None:
            return None
        return next((item for item in unit.incarnations if _ident(item) == state.ident), None)

    def previous(self, unit: UnitSnapshot) -> IncarnationSnapshot | None:
        """The incarnation before the followed one (or, while waiting, the last one)."""
        followed = self.followed(unit)
        items = unit.incarnations
        if followed is None:
            return items[-1] if items else None
        index = items.index(followed)
        return items[index - 1] if index > 0 else None

    def observe(self, snapshot: Snapshot) -> list[WatchEvent]:
        """The events since the last snapshot; sets ``verdict`` when the watch must end."""
        host = next((item for item in snapshot.hosts if item.host == self.host), None)
        units = {unit.unit: unit for unit in host.units} if host is not None else {}
        events: list[WatchEvent] = []
        for name in self.units:
            unit = units.get(name)
            state = self._state[name]
            if unit is None or unit.current is None:
                if not state.waiting_said:
                    state.waiting_said = True
                    events.append(
                        self._event("waiting", name, snapshot, reason="no line of the unit yet")
                    )
                continue
            events.extend(self._observe_unit(unit, host, state, snapshot))
        if self.verdict is None and all(state.done for state in self._state.values()):
            self.verdict = Verdict(EXIT_REACHED)
        return events

    def _event(self, kind: str, unit: str, snapshot: Snapshot, **fields: Any) -> WatchEvent:
        return WatchEvent(kind, self.host, unit, snapshot.at, fields)

    def _observe_unit(
        self,
        unit: UnitSnapshot,
        host: HostSnapshot | None,
        state: _Followed,
        snapshot: Snapshot,
    ) -> list[WatchEvent]:
        current = unit.current
        assert current is not None
        events: list[WatchEvent] = []
        followed = self.followed(unit)
        if followed is not None:
            # the followed one first: a crash and the restart after it may come in one batch
            events += self._judge_followed(unit, followed, host, state, snapshot)
            if self.verdict is not None or followed is current:
                return events
            if followed.outcome is Outcome.CRASHED:
                return events  # its cause is still being chosen: the exit waits for it
            state.ident = None  # ended (or replaced) with a newer one after it
        if state.done and self.until.word == "settled":
            return events  # it settled (stopped): what comes next is another start's
        if current.outcome in (Outcome.STOPPED, Outcome.CRASHED):
            # ended before the watch followed it: a clean stop is settled ("ready, or stopped
            # cleanly"); otherwise wait for the next start (a restart may be on its way)
            settled = current.outcome is Outcome.STOPPED and self.until.word == "settled"
            if state.ended_ident != _ident(current):
                state.ended_ident = _ident(current)
                events.append(
                    self._waiting_after(unit, current, host, snapshot, waiting=not settled)
                )
            state.done = state.done or settled
            return events
        events += self._follow(unit, current, host, state, snapshot)
        return events + self._judge_followed(unit, current, host, state, snapshot)

    def _judge_followed(
        self,
        unit: UnitSnapshot,
        followed: IncarnationSnapshot,
        host: HostSnapshot | None,
        state: _Followed,
        snapshot: Snapshot,
    ) -> list[WatchEvent]:
        """The followed incarnation's news: phases entered, progress, slow, and how the watch
        ends with it (stalled, crashed, reached); a clean stop lets it go."""
        events: list[WatchEvent] = []
        name = unit.unit
        if state.phases_seen is None:  # first sight: the phase it is in, not its history
            state.phases_seen = max(0, len(followed.phases) - 1)
        for entry in followed.phases[state.phases_seen :]:
            events.append(
                self._event(
                    "phase",
                    name,
                    snapshot,
                    invocation_id=followed.id,
                    phase=entry.phase.value,
                    previous_phase=state.phase.value if state.phase else None,
                    entered_at=iso_utc(entry.entered_at),
                )
            )
            state.phase = entry.phase
        state.phases_seen = len(followed.phases)
        if followed.outcome is Outcome.RUNNING:
            events.extend(self._progress_event(unit, followed, state, snapshot))
            if unit.slow and not state.slow:
                events.append(
                    self._event(
                        "slow",
                        name,
                        snapshot,
                        invocation_id=followed.id,
                        phase=followed.phase.value,
                        usual_phase_seconds=unit.usual_phase_seconds,
                    )
                )
            state.slow = unit.slow
            if unit.stalled:
                since = unit.last_progress_at
                quiet = (snapshot.at - since).total_seconds() if since else None
                events.append(
                    self._event(
                        "stalled",
                        name,
                        snapshot,
                        invocation_id=followed.id,
                        phase=followed.phase.value,
                        last_progress_at=iso_utc(since),
                        quiet_seconds=quiet,
                    )
                )
                self._end(
                    EXIT_STALLED,
                    f"{name} stalled in {followed.phase.value}: no progress for "
                    f"{format_duration(quiet)} (the daemon's stall threshold)",
                )
                return events
        if followed.outcome is Outcome.CRASHED and followed.crash is not None:
            if followed.crash.cause.value == "pending" and not _is_counted(unit, followed.crash):
                return events  # the cause is chosen once it settles (SETTLE_SECONDS)
            fields = _crash_fields(followed.crash, unit, host, self.runbook)
            events.append(self._event("crashed", name, snapshot, **fields))
            what = fields["exception"] or ""
            message = shortened(printable(fields["message"]), 300)
            detail = f"{what}: {message}" if what and message else (what or message)
            self._end(
                EXIT_CRASHED,
                f"{name} crashed during {fields['phase']}: cause {fields['cause']}"
                + (f" ({detail})" if detail else ""),
                f"hint: {printable(fields['hint'])} (runbook: {fields['runbook']})",
            )
            return events
        if followed.outcome is Outcome.STOPPED:
            settled = self.until.word == "settled"
            events.append(self._waiting_after(unit, followed, host, snapshot, waiting=not settled))
            state.ended_ident = _ident(followed)
            state.ident = None
            state.phase = None
            state.phases_seen = None
            if self.until.word == "settled":
                state.done = True
            return events
        if not state.done and self.until.is_reached(followed):
            state.done = True
            kind = "ready" if followed.phase is Phase.READY else "reached"
            events.append(
                self._event(
                    kind,
                    name,
                    snapshot,
                    invocation_id=followed.id,
                    phase=followed.phase.value,
                    startup_seconds=(
                        (followed.phase_entered_at - followed.started_at).total_seconds()
                        if kind == "ready" and followed.phase_entered_at and followed.started_at
                        else None
                    ),
                )
            )
        return events

    def _end(self, status: int, *lines: str) -> None:
        if self.verdict is None:
            self.verdict = Verdict(status, tuple(lines))

    def _follow(
        self,
        unit: UnitSnapshot,
        current: IncarnationSnapshot,
        host: HostSnapshot | None,
        state: _Followed,
        snapshot: Snapshot,
    ) -> list[WatchEvent]:
        state.ident = _ident(current)
        state.phase = None
        state.phases_seen = None
        state.slow = False
        state.progress_key = None
        state.progress_at = None
        state.gpu_start_bytes = None
        state.done = False
        events = [
            self._event(
                "following",
                unit.unit,
                snapshot,
                invocation_id=current.id,
                started_at=iso_utc(current.started_at),
                model=current.model,
                vllm_version=current.vllm_version,
                tensor_parallel_size=current.tensor_parallel_size,
            )
        ]
        previous = self.previous(unit)
        if previous is not None and previous.crash is not None and state.ended_ident is None:
            events.append(
                self._event(
                    "previous_crash",
                    unit.unit,
                    snapshot,
                    **_crash_fields(previous.crash, unit, host, self.runbook),
                )
            )
        return events

    def _waiting_after(
        self,
        unit: UnitSnapshot,
        ended: IncarnationSnapshot,
        host: HostSnapshot | None,
        snapshot: Snapshot,
        *,
        waiting: bool = True,
    ) -> WatchEvent:
        """The unit's newest incarnation has ended (before the watch followed it, or a clean
        stop of the followed one): say how; ``waiting``: the watch waits for the next start
        (not when a clean stop settles it)."""
        fields: dict[str, Any] = {
            "invocation_id": ended.id,
            "outcome": ended.outcome.value,
            "ended_at": iso_utc(ended.ended_at),
        }
        if ended.crash is not None:
            fields["crash"] = _crash_fields(ended.crash, unit, host, self.runbook)
        kind = "stopped" if ended.outcome is Outcome.STOPPED else "previous_crash"
        if kind == "previous_crash":
            return self._event(kind, unit.unit, snapshot, **fields["crash"], waiting=True)
        return self._event(kind, unit.unit, snapshot, **fields, waiting=waiting)

    def _progress_event(
        self,
        unit: UnitSnapshot,
        followed: IncarnationSnapshot,
        state: _Followed,
        snapshot: Snapshot,
    ) -> list[WatchEvent]:
        progress = _progress(followed)
        gpu = {str(index): size for index, size in sorted(unit.gpu_memory_used_bytes.items())}
        total = sum(unit.gpu_memory_used_bytes.values())
        if gpu and state.gpu_start_bytes is None:
            state.gpu_start_bytes = total
        eta = _eta(unit)
        ready_at = unit.expected_ready_at
        key = (
            orjson.dumps(progress),
            orjson.dumps(gpu),
            unit.eta_basis,
            unit.eta_overdue_seconds is None,
            # a new ETA when the expected ready time moved by 10 s, not each second it counts
            round(ready_at.timestamp() / 10) if ready_at is not None else None,
        )
        if key == state.progress_key or not (progress or gpu or eta):
            return []
        now = self._monotonic()
        if state.progress_at is not None and now - state.progress_at < self._interval:
            return []
        state.progress_key = key
        state.progress_at = now
        fields: dict[str, Any] = {"invocation_id": followed.id, "phase": followed.phase.value}
        fields.update(progress)
        if gpu:
            fields["gpu_memory_bytes"] = gpu
            fields["gpu_memory_growth_bytes"] = total - (state.gpu_start_bytes or total)
        if eta is not None:
            fields["eta"] = eta
        return [self._event("progress", unit.unit, snapshot, **fields)]


def _is_counted(unit: UnitSnapshot, crash: CrashInfo) -> bool:
    return crash.at is not None and crash.at in unit.recent_crashes


# --- outputs -------------------------------------------------------------------------------


class WatchOutput(Protocol):
    """Where the watch's events go."""

    def events(self, events: Sequence[WatchEvent], snapshot: Snapshot) -> None:
        """New events, and the snapshot they came from (also called with none on a tick)."""

    def close(self) -> None:
        """The watch ends (the last block stays on the screen)."""


class JsonOutput:
    """NDJSON: one event a line, flushed at once (scripts and agents read them as they come)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def events(self, events: Sequence[WatchEvent], snapshot: Snapshot) -> None:
        for event in events:
            shown = printable_values(event.to_json())  # log text: no terminal controls
            self._stream.write(json_for_terminal(orjson.dumps(shown)).decode() + "\n")
        if events:
            self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.1f} GiB"


def event_text(event: WatchEvent) -> str:
    """One line for an event, in the words of ``vllm-sentinel status`` and ``replay``."""
    f = event.fields
    short = (f.get("invocation_id") or "?")[:12]
    if event.event == "waiting":
        return f"waiting: {f.get('reason')}"
    if event.event == "following":
        what = ", ".join(
            part
            for part in (
                f.get("model") and f"model {f['model']}",
                f.get("vllm_version") and f"vLLM {f['vllm_version']}",
                f.get("tensor_parallel_size") and f"TP={f['tensor_parallel_size']}",
            )
            if part
        )
        return f"following incarnation {short} started {f.get('started_at')}" + (
            f" ({what})" if what else ""
        )
    if event.event in ("previous_crash", "crashed"):
        head = "previous incarnation" if event.event == "previous_crash" else "incarnation"
        wait = "; waiting for the next start" if f.get("waiting") else ""
        what = f.get("exception") or ""
        message = f.get("message") or ""
        detail = f"{what}: {message}" if what and message else (what or message)
        return (
            f"{head} {short} crashed during {f.get('phase')}: cause {f.get('cause')}"
            + (f" ({shortened(detail, 200)})" if detail else "")
            + f" — hint: {f.get('hint')} (runbook: {f.get('runbook')}){wait}"
        )
    if event.event == "stopped":
        return f"incarnation {short} stopped" + (
            "; waiting for the next start" if f.get("waiting") else " (settled)"
        )
    if event.event == "phase":
        return f"phase {f.get('phase')}" + (
            f" (after {f['previous_phase']})" if f.get("previous_phase") else ""
        )
    if event.event == "progress":
        return "progress: " + _progress_text(f)
    if event.event == "slow":
        usual = f.get("usual_phase_seconds")
        return f"slower than usual in {f.get('phase')} (usually {format_duration(usual)})"
    if event.event == "stalled":
        quiet = format_duration(f.get("quiet_seconds"))
        return f"stalled in {f.get('phase')}: no progress for {quiet}"
    if event.event == "ready":
        took = f.get("startup_seconds")
        return "ready" + (f" after {format_duration(took)}" if took is not None else "")
    if event.event == "reached":
        return f"reached {f.get('phase')}"
    if event.event == "timed_out":
        return f"timed out: {f.get('state')}"
    return event.event


def _progress_text(fields: Mapping[str, Any]) -> str:
    parts = [str(fields.get("phase"))]
    if "shards_total" in fields:
        parts.append(f"shards {fields['shards_loaded']}/{fields['shards_total']}")
    bar = fields.get("bar")
    if isinstance(bar, Mapping) and bar.get("total"):
        parts.append(f"{bar.get('done')}/{bar.get('total')}")
    gpu = fields.get("gpu_memory_bytes")
    if isinstance(gpu, Mapping) and gpu:
        memory = " ".join(f"GPU{index} {_gib(size)}" for index, size in gpu.items())
        growth = fields.get("gpu_memory_growth_bytes") or 0
        parts.append(memory + (f" (+{_gib(growth)})" if growth > 0 else ""))
    eta = fields.get("eta")
    if isinstance(eta, Mapping) and eta.get("text"):
        parts.append(f"ETA {eta['text']}")
    return " · ".join(parts)


class LineOutput:
    """Plain lines, one per event: ``HH:MM:SS host unit: text`` (piped, or ``--plain``)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def events(self, events: Sequence[WatchEvent], snapshot: Snapshot) -> None:
        for event in events:
            when = event.at.astimezone(UTC).strftime("%H:%M:%S")
            line = printable(f"{when} {event.host} {event.unit}: {event_text(event)}")
            self._stream.write(line + "\n")
        if events:
            self._stream.flush()

    def close(self) -> None:
        self._stream.flush()


class LiveOutput:
    """One block per unit on a terminal, redrawn in place (cursor up, clear to the end).

    Each line is cut to the terminal's width so that the redraw moves up exactly as many
    lines as were drawn. Args: ``stream`` (a terminal), ``judge`` (which incarnation is
    followed), ``width`` (its columns, or a function that reads them before each draw).
    """

    def __init__(self, stream: TextIO, judge: WatchJudge, width: int | Callable[[], int]) -> None:
        self._stream = stream
        self._judge = judge
        self._columns = width if callable(width) else (lambda: width)
        self._width = max(40, self._columns())
        self._drawn = 0
        self._notes: dict[str, list[str]] = {}

    def events(self, events: Sequence[WatchEvent], snapshot: Snapshot) -> None:
        for event in events:
            if event.event in ("previous_crash", "crashed"):
                self._notes[event.unit] = _crash_lines(event)
            elif event.event in ("waiting", "stopped"):
                self._notes[event.unit] = [event_text(event)]
            elif event.event == "following":  # its previous_crash, if any, comes next
                self._notes.pop(event.unit, None)
        self._width = max(40, self._columns())  # read again: the terminal may be resized
        lines = self.block(snapshot)
        out = "\x1b[J" if not self._drawn else f"\x1b[{self._drawn}F\x1b[J"
        self._stream.write(out + "".join(line + "\n" for line in lines))
        self._stream.flush()
        self._drawn = len(lines)

    def block(self, snapshot: Snapshot) -> list[str]:
        """The lines drawn for ``snapshot`` (cut to the width, control characters replaced)."""
        judge = self._judge
        host = next((item for item in snapshot.hosts if item.host == judge.host), None)
        units = {unit.unit: unit for unit in host.units} if host is not None else {}
        now = snapshot.at
        lines: list[str] = []
        for name in judge.units:
            unit = units.get(name)
            followed = judge.followed(unit) if unit is not None else None
            if followed is None:
                lines.append(f"{name} on {judge.host}: waiting for a start")
            else:
                started = followed.started_at
                age = f", {format_duration((now - started).total_seconds())} ago" if started else ""
                lines.append(
                    f"{name} on {judge.host}: incarnation {(followed.id or '?')[:12]} "
                    f"started {_clock(started)}{age}"
                )
                lines.extend(self._details(unit, followed, now))  # type: ignore[arg-type]
            for note in self._notes.get(name, ()):
                indent = "  " + " " * (len(note) - len(note.lstrip()))
                lines.extend(
                    textwrap.wrap(
                        printable(note.strip()),
                        self._width,
                        initial_indent=indent,
                        subsequent_indent=indent + "  ",
                        max_lines=4,
                        placeholder=" …",
                    )
                )
        return [printable(line)[: self._width] for line in lines]

    @staticmethod
    def _details(unit: UnitSnapshot, item: IncarnationSnapshot, now: datetime) -> list[str]:
        entered = item.phase_entered_at
        spent = f" for {format_duration((now - entered).total_seconds())}" if entered else ""
        flags = []
        if unit.stalled:
            flags.append("STALLED")
        elif unit.slow:
            flags.append(f"slower than usual ({format_duration(unit.usual_phase_seconds)})")
        phase = f"  phase    {item.phase.value}{spent}" + (
            f" · {', '.join(flags)}" if flags else ""
        )
        lines = [phase]
        progress = _progress(item)
        if progress:
            lines.append("  progress " + _progress_text({"phase": item.phase.value, **progress}))
        eta = _eta(unit)
        if eta is not None and eta.get("text"):
            lines.append(f"  ETA      {eta['text']}")
        if unit.gpu_memory_used_bytes:
            memory = "  ".join(
                f"GPU{index} {_gib(size)}"
                for index, size in sorted(unit.gpu_memory_used_bytes.items())
            )
            grown = unit.last_gpu_growth_at
            growth = (
                f" (last grew {format_duration((now - grown).total_seconds())} ago)"
                if grown
                else ""
            )
            lines.append(f"  GPU      {memory}{growth}")
        return lines

    def close(self) -> None:
        self._stream.flush()


def _crash_lines(event: WatchEvent) -> list[str]:
    """A crash in the live block: what, the exception, the hint and the runbook, a line each
    (a hint cut off at the terminal's edge helps nobody)."""
    f = event.fields
    head = "previous incarnation" if event.event == "previous_crash" else "incarnation"
    wait = "; waiting for the next start" if f.get("waiting") else ""
    lines = [
        f"{head} {(f.get('invocation_id') or '?')[:12]} crashed during {f.get('phase')}: "
        f"cause {f.get('cause')}{wait}"
    ]
    what = ": ".join(part for part in (f.get("exception"), f.get("message")) if part)
    if what:
        lines.append(f"  {what}")
    lines.append(f"  hint: {f.get('hint')}")
    lines.append(f"  runbook: {f.get('runbook')}")
    return lines


def _clock(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%H:%M:%S UTC") if value is not None else "?"


# --- the loop ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """Where the units run and how to read them.

    Attributes:
        host: the host's name (the daemon's label for it: its startup history is kept
            under this name).
        transport: runs ``journalctl`` (and ``nvidia-smi``) there.
        journalctl_args: options choosing the journal (``--directory=DIR``).
        gpu: ``nvml`` (this machine), ``nvidia-smi`` (over the transport), a ``GpuReader``
            of one's own (tests: NVML scripted), or ``None``.
        history_directory: the daemon's ``<state directory>/history`` (read, never written).
        host_from_journal: the journal is another machine's (``--directory`` on this one):
            ``run_watch`` names the host after the ``_HOSTNAME`` of the units' latest record
            (``journal_host``), ``host`` (the directory's name) when none says it.
    """

    host: str
    transport: Transport
    journalctl_args: tuple[str, ...] = ()
    gpu: str | GpuReader | None = None
    history_directory: str | None = None
    host_from_journal: bool = False


class _UnreadableError(Exception):
    """The journal cannot be read: one line for stderr."""


def _transport_words(error: TransportError) -> str:
    """A transport failure in the CLI's words: ``connection refused``, ``connection timed
    out``, a host key's own sentence; never a Python exception's name and repr."""
    import errno as errnos
    import os
    import socket

    cause = error.__cause__
    while cause is not None and not isinstance(cause, OSError) and cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, TimeoutError) and not cause.errno:
        return f"cannot connect: no answer within the connect timeout ({error.reason})"
    if isinstance(cause, socket.gaierror):
        return f"cannot resolve the host name: {(cause.strerror or str(cause)).lower()}"
    if isinstance(cause, OSError) and cause.errno and not isinstance(cause, FileNotFoundError):
        words = os.strerror(cause.errno).lower()
        if cause.errno == errnos.ECONNREFUSED:
            words += " (nothing listens on that port: check --host's port, and that sshd runs)"
        return f"cannot connect: {words}"
    detail = error.detail or error.reason.replace("_", " ")
    name = type(cause).__name__ if cause is not None else ""
    if name and detail.startswith(f"{name}: "):
        detail = detail[len(name) + 2 :]
    if error.reason == "ssh_connect_failed":
        return f"cannot connect: {detail[:1].lower()}{detail[1:]}"
    return detail


async def _preflight(target: WatchTarget) -> None:
    """Read one entry of the journal, so that a connection, host-key or journalctl failure is
    one line and exit 2 now, not a retry loop until the timeout."""
    argv = build_journalctl_argv((), target.journalctl_args, lines=1)
    try:
        output = await target.transport.run(argv, _PREFLIGHT_TIMEOUT_SECONDS)
    except TransportError as error:
        detail = _transport_words(error)
        raise _UnreadableError(f"cannot read the journal of {target.host}: {detail}") from error
    if not output.strip():
        raise _UnreadableError(
            f"cannot read the journal of {target.host}: journalctl finds no entries (no journal "
            "files where it looks, or not readable by this user: the systemd-journal group)"
        )


async def journal_host(target: WatchTarget, units: Sequence[str]) -> str:
    """The machine a journal of files belongs to: the ``_HOSTNAME`` of the latest record of
    ``units`` in ``target``'s journal, when it is a host's name (``config.is_host_name``: log
    text of another shape names nothing); else ``target.host``. A journal-remote directory
    may hold several machines: the units' own records say which one runs them."""
    from vllm_sentinel.config import is_host_name

    argv = build_journalctl_argv(
        units, target.journalctl_args, lines=1, output_fields=("_HOSTNAME",)
    )
    try:
        output = await target.transport.run(argv, _PREFLIGHT_TIMEOUT_SECONDS)
    except TransportError:
        return target.host  # the preflight read this journal: the follower will say why
    for line in reversed(output.splitlines()):
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        name = entry.get("_HOSTNAME") if isinstance(entry, dict) else None
        if isinstance(name, str) and is_host_name(name):
            return name
    return target.host


async def run_watch(
    target: WatchTarget,
    units: Sequence[str],
    until: Until,
    output: Callable[[WatchJudge], WatchOutput],
    *,
    timeout_seconds: float | None = None,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Follow ``units`` of ``target`` until ``until`` (every unit), a crash, a stall or the
    timeout; return the exit status (``EXIT_*``), after writing the verdict's lines with
    ``err`` (``vllm-sentinel: `` is the caller's prefix, not added here)."""
    from vllm_sentinel.serve.runbook import installed_runbook

    try:
        await _preflight(target)
    except _UnreadableError as error:
        err(str(error))
        return EXIT_UNREADABLE
    if target.host_from_journal:
        target = replace(target, host=await journal_host(target, units))
    judge = WatchJudge(target.host, units, until, runbook=installed_runbook())
    out = output(judge)
    history = HistoryStore(target.history_directory)
    with contextlib.suppress(OSError):
        await asyncio.to_thread(history.load)
    monitor = Monitor(
        [HostPlan(target.host, tuple(units))],
        clock=clock,
        history=history,
        settle_seconds=SETTLE_SECONDS,
        traceback_hold_seconds=TRACEBACK_HOLD_SECONDS,
    )
    follower = JournalFollower(
        target.host,
        target.transport,
        FollowerSettings(
            units=tuple(units),
            journalctl_args=target.journalctl_args,
            backfill_max_invocations=2,  # the current start and the one before (its crash)
        ),
        clock=clock,
    )
    monitor.register_collector(target.host, "journal", lambda: follower.state)
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=4096)
    deadline = time.monotonic() + timeout_seconds if timeout_seconds is not None else None
    tasks: list[asyncio.Task[None]] = []

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            await queue.put(Tick(clock()))

    async def gpu(poller: GpuPoller) -> None:
        # each GPU process's unit from its cgroup, as the daemon reads it (once per new PID)
        cgroups = CgroupReader(None if target.gpu != "nvidia-smi" else target.transport)

        async def emit(reading: GpuReading) -> None:
            try:
                owners = await cgroups.units_of(process.pid for process in reading.processes)
            except GpuCollectorError:
                owners = {}  # the Monitor falls back to the PIDs the journal showed
            await queue.put(GpuSample(target.host, reading, owners))

        await poller.run(emit)

    poller = _gpu_poller(target)
    try:
        tasks.append(asyncio.create_task(follower.run(queue.put)))
        tasks.append(asyncio.create_task(tick()))
        if poller is not None:
            tasks.append(asyncio.create_task(gpu(poller)))
        backfilled = False
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    item = await queue.get()
            except TimeoutError:
                break
            items = [item]
            while not queue.empty() and len(items) < 512:
                items.append(queue.get_nowait())
            for each in items:
                monitor.apply(each)  # type: ignore[arg-type]
                if isinstance(each, JournalBatch) and not each.backfill and not each.records:
                    backfilled = True
            if not backfilled:
                continue
            snapshot = monitor.publish()
            events = judge.observe(snapshot)
            out.events(events, snapshot)
            if judge.verdict is not None:
                for line in judge.verdict.lines:
                    err(line)
                return judge.verdict.status
        snapshot = monitor.publish()
        waiting = [_where(judge, snapshot, event_unit) for event_unit in judge.units]
        out.events(
            [
                WatchEvent("timed_out", target.host, unit, snapshot.at, {"state": text})
                for unit, text in zip(judge.units, waiting, strict=True)
            ],
            snapshot,
        )
        err(
            f"timed out after {format_duration(timeout_seconds)}: "
            + "; ".join(f"{unit}: {text}" for unit, text in zip(judge.units, waiting, strict=True))
        )
        return EXIT_TIMED_OUT
    finally:
        try:
            out.close()  # an OSError writing stdout goes to the caller, after the clean-up
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await target.transport.close()


def _where(judge: WatchJudge, snapshot: Snapshot, name: str) -> str:
    host = next((item for item in snapshot.hosts if item.host == judge.host), None)
    unit = next((item for item in host.units if item.unit == name), None) if host else None
    followed = judge.followed(unit) if unit is not None else None
    if followed is not None:
        return f"{followed.phase.value} (incarnation {(followed.id or '?')[:12]})"
    last = unit.current if unit is not None else None
    if last is None or last.outcome is Outcome.RUNNING:
        return "no start seen"
    short = (last.id or "?")[:12]
    if last.crash is not None:
        crash = last.crash
        how = f"crashed during {crash.phase.value}: cause {crash.cause.value}"
    else:
        how = last.outcome.value
    return f"last start {short} {how}, no new start"


def _gpu_poller(target: WatchTarget) -> GpuPoller | None:
    reader: GpuReader
    if target.gpu is None:
        return None
    if not isinstance(target.gpu, str):
        reader = target.gpu
    elif target.gpu == "nvml":
        reader = NvmlReader(host=target.host)
    elif target.gpu == "nvidia-smi":
        reader = NvidiaSmiStreamReader(target.transport, interval_seconds=2.0, timeout_seconds=5.0)
    else:
        return None
    return GpuPoller(
        target.host,
        reader,
        2.0,
        reader_paced=isinstance(reader, NvidiaSmiStreamReader),
        backoff_initial_seconds=5.0,
        backoff_max_seconds=120.0,
    )
