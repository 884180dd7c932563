"""What a unit counts, as a value that survives a restart of the daemon (core: pure).

The Prometheus counters of a unit (starts, crashes by cause, log records by level, benign
errors) are kept by its ``UnitTracker``. The daemon saves them with the journal cursor they
belong to (``cursors.CursorStore``, one atomic file per host), and a restarted daemon goes on
counting from them: Prometheus sees one counter that never goes down, not a reset.

A crash is counted once its root cause is settled (``UnitTracker``), a while after its end. A
crash the daemon applied but had not counted when it saved is saved as a ``CarriedCrash``:
the next run counts it when it reads the crash again (its records are before the saved cursor,
so they are history, which counts nothing else), or, when the journal no longer holds them, at
the end of its backfill with the cause known when it was saved.

``to_json``/``from_json`` give the saved form: plain JSON types, unknown causes and levels
dropped, every number checked (a damaged file never raises, it yields what is valid).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Phase

__all__ = ["LOG_LEVELS", "CarriedCrash", "UnitCounters", "from_micros", "micros"]

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical", "none")
"""vLLM log levels as the tracker counts records; ``none`` is a record without a vLLM header."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_COUNT = 1 << 62
_LEVELS = frozenset(LOG_LEVELS)


def micros(time: datetime) -> int:
    """Microseconds since the epoch (UTC), as journald writes times."""
    return (time - _EPOCH) // timedelta(microseconds=1)


def from_micros(value: object) -> datetime | None:
    """The time of ``micros``; ``None`` for anything that is not a usable count of µs."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return _EPOCH + timedelta(microseconds=value)
    except OverflowError:
        return None


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_COUNT:
        return value
    return None


@dataclass(frozen=True, slots=True)
class CarriedCrash:
    """A crash a daemon applied but had not counted yet when it saved its state.

    Attributes:
        key: the crashed incarnation's systemd invocation id, or its end time in µs
            (``t:<µs>``) when it has none.
        started_at, ended_at: when the incarnation began and ended (log time), if known: the
            next run reads the journal from ``started_at`` so that it sees the crash again.
        cause, phase: the root cause and phase known at the save (used if it is not seen again).
    """

    key: str
    started_at: datetime | None
    ended_at: datetime | None
    cause: CrashCause
    phase: Phase

    def to_json(self) -> dict[str, Any]:
        """The saved form (plain JSON types)."""
        return {
            "key": self.key,
            "started": micros(self.started_at) if self.started_at else None,
            "ended": micros(self.ended_at) if self.ended_at else None,
            "cause": self.cause.value,
            "phase": self.phase.value,
        }

    @classmethod
    def from_json(cls, data: object) -> CarriedCrash | None:
        """Read the saved form; ``None`` when it is not one."""
        if not isinstance(data, Mapping):
            return None
        key = data.get("key")
        if not isinstance(key, str) or not key or len(key) > 128:
            return None
        try:
            cause = CrashCause(str(data.get("cause")))
        except ValueError:
            cause = CrashCause.UNKNOWN
        try:
            phase = Phase(str(data.get("phase")))
        except ValueError:
            phase = Phase.CRASHED
        return cls(
            key, from_micros(data.get("started")), from_micros(data.get("ended")), cause, phase
        )


@dataclass(frozen=True, slots=True)
class UnitCounters:
    """The counters of one unit (the values of its ``*_total`` series).

    Attributes:
        starts: incarnations started.
        crashes: settled crashes by root cause.
        records: log records by level (``LOG_LEVELS``).
        benign_errors: ERROR records matched as benign.
        carried: crashes applied but not counted yet (see the module docstring).
    """

    starts: int = 0
    crashes: Mapping[CrashCause, int] = field(default_factory=lambda: MappingProxyType({}))
    records: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    benign_errors: int = 0
    carried: tuple[CarriedCrash, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The saved form (plain JSON types, zero counts left out)."""
        data: dict[str, Any] = {
            "starts": self.starts,
            "crashes": {cause.value: n for cause, n in self.crashes.items() if n},
            "records": {level: n for level, n in self.records.items() if n},
            "benign": self.benign_errors,
        }
        if self.carried:
            data["carried"] = [crash.to_json() for crash in self.carried]
        return data

    @classmethod
    def from_json(cls, data: object) -> UnitCounters | None:
        """Read the saved form; ``None`` when it is not a mapping. Bad values are dropped."""
        if not isinstance(data, Mapping):
            return None
        crashes: dict[CrashCause, int] = {}
        raw_crashes = data.get("crashes")
        if isinstance(raw_crashes, Mapping):
            for name, raw in raw_crashes.items():
                count = _count(raw)
                try:
                    cause = CrashCause(name)
                except ValueError:
                    continue
                if count:
                    crashes[cause] = count
        records: dict[str, int] = {}
        raw_records = data.get("records")
        if isinstance(raw_records, Mapping):
            for level, raw in raw_records.items():
                count = _count(raw)
                if level in _LEVELS and count:
                    records[level] = count
        raw_carried = data.get("carried")
        carried = tuple(
            crash
            for crash in (
                CarriedCrash.from_json(item)
                for item in (raw_carried if isinstance(raw_carried, list) else ())
            )
            if crash is not None
        )
        return cls(
            starts=_count(data.get("starts")) or 0,
            crashes=MappingProxyType(crashes),
            records=MappingProxyType(records),
            benign_errors=_count(data.get("benign")) or 0,
            carried=carried[:64],
        )
