"""``HistoryStore``: each unit's startup history, kept across daemon restarts (edge).

For every incarnation that reached ``ready`` the Monitor adds a ``StartupRecord`` (its phase
durations, model, vLLM version, tensor parallel size, start and ready times); the store keeps
the newest ``eta.HISTORY_SIZE`` per unit, each start once (``eta.remember``: same invocation
id, or same start time), in memory for the Monitor and on disk for the next run.

Files: ``<state directory>/history/<host>/<unit>.json``, the names percent-encoded
(``urllib.parse.quote``, a leading ``.`` too), so any host or unit name maps to one plain file
name and back. A file holds ``{"format": 1, "host", "unit", "starts": [...]}``. ``load`` reads
every file once, at start, in a worker thread; ``flush`` writes the changed units atomically
(``atomic_file.write_atomically``: a unique temporary file, fsync, rename, fsync of the
directory), at most one flush at a time (``serial_flush.SerialFlush``), like
``cursors.CursorStore``. A file that cannot be read or does not hold a valid history is
reported once (``history_file_corrupt``, a warning naming the file and the error), counted in
``vllm_sentinel_records_skipped_total{reason="history_file_corrupt"}`` of its host, renamed to
``….json.corrupt`` (kept for a person to read, never read again) and otherwise ignored: the
unit's history starts afresh.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Literal
from urllib.parse import quote, unquote

import orjson
import structlog
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.eta import HISTORY_SIZE, remember
from vllm_sentinel.engine.snapshot import StartupRecord
from vllm_sentinel.log import Throttle
from vllm_sentinel.state.atomic_file import write_atomically
from vllm_sentinel.state.serial_flush import SerialFlush

__all__ = [
    "FAILURE_LOG_INTERVAL_SECONDS",
    "HISTORY_SKIP_REASON",
    "HistoryStore",
    "decode_name",
    "encode_name",
]

FAILURE_LOG_INTERVAL_SECONDS = 60.0
"""``history_save_failed`` is logged at most this often while writes keep failing."""

HISTORY_SKIP_REASON = "history_file_corrupt"
"""The ``records_skipped_total`` reason of a history file that could not be read."""

_FORMAT = 1
_SUFFIX = ".json"
_CORRUPT_SUFFIX = ".corrupt"
_MAX_NAME = 200  # bytes of an encoded name kept whole (file systems allow 255)
_log = structlog.get_logger("vllm_sentinel.state.history_store")

_Key = tuple[str, str]
_StartupPhase = Literal[  # phases.STARTUP_PHASES (tests/edges/test_history.py checks)
    "starting",
    "initializing",
    "loading_weights",
    "compiling",
    "profiling_kv_cache",
    "capturing_cuda_graphs",
    "starting_api_server",
]


class _StartModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    started_at: AwareDatetime
    ready_at: AwareDatetime
    phase_seconds: dict[_StartupPhase, Annotated[float, Field(ge=0, le=1e8)]] = Field(
        default_factory=dict
    )
    invocation_id: str | None = Field(default=None, max_length=128)
    model: str | None = Field(default=None, max_length=256)
    vllm_version: str | None = Field(default=None, max_length=64)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    # how it loaded (RuntimeModes.startup_kind, vllm2026); absent in older files: a full load
    startup_kind: Literal["full", "weight_cache", "startup_plan"] = "full"


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    format: Literal[1]
    host: str = Field(min_length=1)
    unit: str = Field(min_length=1)
    starts: list[_StartModel] = Field(max_length=1000)


def encode_name(name: str) -> str:
    """A host or unit name as one safe file name (percent-encoding; reversible)."""
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]  # never ".", ".." or a hidden file
    if len(encoded) > _MAX_NAME:
        raise ValueError(f"name too long for a file name: {name[:40]!r}…")
    return encoded


def decode_name(encoded: str) -> str:
    """The name ``encode_name`` encoded."""
    return unquote(encoded)


def _record(item: _StartModel) -> StartupRecord:
    return StartupRecord(
        started_at=item.started_at,
        ready_at=item.ready_at,
        phase_seconds=MappingProxyType(
            {Phase(phase): seconds for phase, seconds in item.phase_seconds.items()}
        ),
        invocation_id=item.invocation_id,
        model=item.model,
        vllm_version=item.vllm_version,
        tensor_parallel_size=item.tensor_parallel_size,
        startup_kind=item.startup_kind,
    )


def _start(record: StartupRecord) -> dict[str, object]:
    start: dict[str, object] = {
        "started_at": record.started_at,
        "ready_at": record.ready_at,
        "phase_seconds": {phase.value: seconds for phase, seconds in record.phase_seconds.items()},
        "invocation_id": record.invocation_id,
        "model": record.model,
        "vllm_version": record.vllm_version,
        "tensor_parallel_size": record.tensor_parallel_size,
    }
    if record.startup_kind != "full":
        start["startup_kind"] = record.startup_kind  # older readers ignore it
    return start


def _document(host: str, unit: str, records: tuple[StartupRecord, ...]) -> bytes:
    return orjson.dumps(
        {
            "format": _FORMAT,
            "host": host,
            "unit": unit,
            "starts": [_start(record) for record in records],
        },
        option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z,
    )


class HistoryStore:
    """Startup records per (host, unit), in memory and (with a directory) on disk.

    ``records`` and ``add`` are for the Monitor (the one writer); ``flush`` may run in another
    thread.

    Args:
        directory: where the files live (``<state directory>/history``); ``None`` keeps the
            history in memory only (the demo, tests).
        max_starts: records kept per unit (the newest).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        *,
        max_starts: int = HISTORY_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.failures_total = 0
        # like cursor_save_failed: a full or read-only disk fails every flush of every unit
        self._throttle = Throttle(FAILURE_LOG_INTERVAL_SECONDS, clock)
        self._max = max_starts
        self._records: dict[_Key, tuple[StartupRecord, ...]] = {}
        self._skipped: dict[str, dict[str, int]] = {}
        self._dirty: set[_Key] = set()
        self._state_lock = threading.Lock()  # _records and _dirty
        self._write_lock = threading.Lock()  # one writer of the files at a time
        self._flush = SerialFlush(self.flush_sync, lambda: bool(self._dirty))

    # --- reading -------------------------------------------------------------------------

    def load(self) -> int:
        """Read every history file (blocking: call it from a thread); return how many units.

        A corrupt file is logged once, counted, renamed to ``….json.corrupt`` and skipped.
        """
        if self.directory is None or not self.directory.is_dir():
            return 0
        loaded = 0
        for path in sorted(self.directory.glob(f"*/*{_SUFFIX}")):
            host = decode_name(path.parent.name)
            try:
                document = _FileModel.model_validate_json(path.read_bytes())
            except (OSError, ValidationError, ValueError) as error:
                self._reject(path, host, error)
                continue
            records: tuple[StartupRecord, ...] = ()
            for item in document.starts:
                added = remember(records, _record(item), self._max)
                records = added if added is not None else records
            with self._state_lock:
                self._records[(document.host, document.unit)] = records
            loaded += 1
        return loaded

    def _reject(self, path: Path, host: str, error: Exception) -> None:
        aside = path.with_name(path.name + _CORRUPT_SUFFIX)
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        _log.warning(
            "history_file_corrupt",
            path=str(path),
            moved_to=str(aside),
            host=host,
            error=detail[:300],
            detail="this unit's startup history starts afresh",
        )
        with self._state_lock:
            counts = self._skipped.setdefault(host, {})
            counts[HISTORY_SKIP_REASON] = counts.get(HISTORY_SKIP_REASON, 0) + 1

    def records(self, host: str, unit: str) -> tuple[StartupRecord, ...]:
        """The unit's startup records, oldest first."""
        return self._records.get((host, unit), ())

    def skipped(self, host: str) -> Mapping[str, int]:
        """History files of ``host`` that could not be read, by reason."""
        with self._state_lock:
            return dict(self._skipped.get(host, {}))

    # --- writing -------------------------------------------------------------------------

    def add(self, host: str, unit: str, record: StartupRecord) -> bool:
        """Add a start to the unit's history; False when it is there already."""
        with self._state_lock:
            added = remember(self._records.get((host, unit), ()), record, self._max)
            if added is None:
                return False
            self._records[(host, unit)] = added
            if self.directory is not None:
                self._dirty.add((host, unit))
        _log.debug(
            "startup_recorded",
            host=host,
            unit=unit,
            invocation_id=record.invocation_id,
            startup_seconds=round(record.startup_seconds, 3),
        )
        return True

    async def flush(self) -> int:
        """Write every changed unit's file atomically, in a worker thread.

        Returns:
            How many files were written; 0 when nothing changed or the write failed
            (``history_save_failed`` is logged and the units stay pending).
        """
        return await self._flush()

    def flush_sync(self) -> int:
        """The same as ``flush``, blocking; never raises ``OSError``."""
        with self._write_lock:
            with self._state_lock:
                pending = {key: self._records[key] for key in self._dirty}
                self._dirty.clear()
            if not pending or self.directory is None:
                return 0
            written = 0
            for (host, unit), records in pending.items():
                try:
                    self._write(host, unit, records)
                except (OSError, ValueError) as error:
                    with self._state_lock:
                        self._dirty.add((host, unit))
                    self.failures_total += 1
                    count = self._throttle.admit()
                    if count is not None:
                        _log.error(
                            "history_save_failed",
                            directory=str(self.directory),
                            host=host,
                            unit=unit,
                            error=str(error),
                            failures=count,
                            failures_total=self.failures_total,
                            detail="kept for the next flush; logged at most every "
                            f"{FAILURE_LOG_INTERVAL_SECONDS:g} s",
                        )
                    continue
                written += 1
            return written

    def _write(self, host: str, unit: str, records: tuple[StartupRecord, ...]) -> None:
        assert self.directory is not None
        folder = self.directory / encode_name(host)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / (encode_name(unit) + _SUFFIX), _document(host, unit, records))
