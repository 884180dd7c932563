"""``CursorStore``: each host's last applied journal cursor and counters, kept across restarts
(edge).

One file per host, ``<state directory>/<encoded host>.cursor``:

* line 1: the journal cursor of the last record the Monitor applied (empty: none yet);
* line 2: ``state=`` and a JSON object: ``since`` (µs; without a cursor, records up to then
  are history: the host's first start) and ``units``, each unit's counters as they were right
  after that record was applied (``counters.UnitCounters``), crashes not counted yet included.

The cursor and the counters are written together, atomically (``atomic_file``: a unique
temporary file in the state directory, fsync, rename, fsync of the directory): a crash of the
daemon, SIGKILL included, leaves the old pair or the new one, never a torn file or a cursor
without its counters. A restarted daemon therefore goes on counting from exactly the saved
counters, and treats every record up to the saved cursor as history: nothing is counted twice
or lost. ``saved(host)`` is what the last successful write (or the file, at start) holds: the
exporter shows counters from it, never counts it could not save yet.

Host names become file names only through ``encode_host`` (percent-encoding: reversible, no
``/``, no name starting with ``.``). Files of earlier versions (``<host>.cursor`` with the
name as it is, the cursor alone, maybe ``unsettled_since=``) are read, and renamed when the
encoding differs, so an upgrade keeps its cursors.

Writes are coalesced: the daemon flushes at a bounded interval and once on shutdown. One flush
writes at a time (``serial_flush.SerialFlush``): a flush waits for the one in flight (the
periodic flush cancelled on shutdown keeps writing in its worker thread), and a write that
fails keeps its states pending for the next flush; failures are counted (``failures_total``),
logged at most once a minute with how many there were (``cursor_save_failed``), and the
recovery is logged once (``cursor_saved``).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote

import orjson
import structlog

from vllm_sentinel.engine.counters import UnitCounters, from_micros, micros
from vllm_sentinel.errors import StateDirectoryError
from vllm_sentinel.log import Throttle
from vllm_sentinel.state.atomic_file import replace_file, sync_directory
from vllm_sentinel.state.serial_flush import SerialFlush

__all__ = [
    "FAILURE_LOG_INTERVAL_SECONDS",
    "LOCK_FILE",
    "CursorStore",
    "HostState",
    "decode_host",
    "encode_host",
    "lock_name",
]


FAILURE_LOG_INTERVAL_SECONDS = 60.0
"""``cursor_save_failed`` is logged at most this often while writes keep failing."""

LOCK_FILE = "lock"
"""The file in the state directory a running daemon holds an exclusive ``flock`` on."""


def lock_name(shard: str) -> str:
    """The lock file of an instance: ``lock``, or ``lock.shard-I-of-N`` for shard ``I/N``
    (shards watch disjoint hosts, so they may share a state directory)."""
    if shard == "1/1":
        return LOCK_FILE
    index, _, count = shard.partition("/")
    return f"{LOCK_FILE}.shard-{index}-of-{count}"


_STATE = "state="
_LEGACY_UNSETTLED = "unsettled_since="
_SUFFIX = ".cursor"
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_log = structlog.get_logger("vllm_sentinel.state.cursor_store")


def encode_host(host: str) -> str:
    """The file-name form of a host name: letters, digits, ``_`` and ``-`` as they are, ``.``
    too except in first place, everything else ``%XX`` (UTF-8). Reversible (``unquote``);
    ``..`` becomes ``%2E.``, ``a:b`` ``a%3Ab``."""
    out: list[str] = []
    for index, char in enumerate(host):
        if char in _PLAIN or (char == "." and index > 0):
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)


def decode_host(name: str) -> str:
    """The host name of an ``encode_host`` file-name form."""
    return unquote(name, errors="strict")


@dataclass(frozen=True, slots=True)
class HostState:
    """What is saved for one host.

    Attributes:
        cursor: the cursor of the last applied record, or ``None``.
        since: without a cursor, records written up to this time are history (the host's first
            start); ``None`` in files of earlier versions.
        units: unit name → its counters right after the record of ``cursor`` was applied.
        read_from: when the oldest incarnation whose outcome could still change began (a
            running one, a crash not settled): the next run reads the journal from there.
    """

    cursor: str | None = None
    since: datetime | None = None
    units: Mapping[str, UnitCounters] = field(default_factory=lambda: MappingProxyType({}))
    read_from: datetime | None = None
    legacy: bool = False  # read from an earlier version's file: no counters were saved

    def text(self) -> str:
        """The file's content."""
        state = {
            "since": micros(self.since) if self.since is not None else None,
            "from": micros(self.read_from) if self.read_from is not None else None,
            "units": {unit: counters.to_json() for unit, counters in sorted(self.units.items())},
        }
        return f"{self.cursor or ''}\n{_STATE}{orjson.dumps(state).decode()}\n"

    @classmethod
    def parse(cls, text: str) -> HostState | None:
        """Read a file's content; ``None`` when it holds no cursor and no state."""
        lines = text.splitlines()
        if not lines:
            return None
        cursor = lines[0].strip() or None
        for line in lines[1:]:
            if not line.startswith(_STATE):
                continue
            try:
                data = orjson.loads(line[len(_STATE) :])
            except orjson.JSONDecodeError:
                break
            if not isinstance(data, dict):
                break
            raw_units = data.get("units")
            units: dict[str, UnitCounters] = {}
            if isinstance(raw_units, dict):
                for unit, raw in raw_units.items():
                    counters = UnitCounters.from_json(raw)
                    if isinstance(unit, str) and counters is not None:
                        units[unit] = counters
            return cls(
                cursor,
                from_micros(data.get("since")),
                MappingProxyType(units),
                from_micros(data.get("from")),
            )
        if cursor is None:
            return None
        return cls(cursor, legacy=True)  # an earlier version's file: the cursor alone


class CursorStore:
    """Cursors and counters in ``directory/<encoded host>.cursor``.

    ``mark`` and the flushes may be called from different threads.

    Args:
        directory: the state directory (systemd ``StateDirectory=``); created if missing.
        clock: monotonic seconds, for the rate of failure logs (injected by tests).
        wall_clock: the time of a successful save (``saved_at``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.directory = Path(directory)
        self._clock = clock
        self._wall_clock = wall_clock
        self._marked: dict[str, HostState] = {}
        self._saved: dict[str, HostState] = {}
        self._dirty: set[str] = set()
        self._warned: set[str] = set()  # hosts whose unreadable file was logged
        self._state_lock = threading.Lock()  # _marked, _saved, _dirty, the failure figures
        self._write_lock = threading.Lock()  # one writer of the files at a time
        self._flush = SerialFlush(self.flush_sync, lambda: self.pending)
        self.failures_total = 0
        self.saved_at: datetime | None = None  # the last successful write (wall clock)
        self._failing = False
        self._throttle = Throttle(FAILURE_LOG_INTERVAL_SECONDS, clock)
        self._lock_descriptor: int | None = None

    # --- paths ---------------------------------------------------------------------------

    def path(self, host: str) -> Path:
        """The file of ``host``."""
        return self.directory / f"{encode_host(host)}{_SUFFIX}"

    def _legacy_path(self, host: str) -> Path | None:
        """Where an earlier version kept the file (the name as it was), if it differs."""
        if host.startswith(".") or "/" in host or host == "":
            return None
        legacy = self.directory / f"{host}{_SUFFIX}"
        return legacy if legacy != self.path(host) else None

    def lock(self, name: str = LOCK_FILE) -> None:
        """Take the state directory for this process: an exclusive ``flock`` on its lock
        file ``name`` (holding this PID), kept until ``unlock`` or the process ends (the kernel
        drops it, even after SIGKILL). Two daemons watching the same hosts from one directory
        would overwrite each other's cursors and counters; shards of one fleet (disjoint hosts)
        each lock their own file (``lock_name``).

        Raises:
            StateDirectoryError: another process holds it (the message names its PID), or the
                lock file cannot be opened.
        """
        path = self.directory / name
        try:
            # 0600: a user who can open the file (even read-only) could flock it, keeping the
            # daemon from starting
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise StateDirectoryError(
                f"cannot open {path}: {(error.strerror or str(error)).lower()}"
            ) from error
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
            os.close(descriptor)
            raise StateDirectoryError(
                f"the state directory {self.directory} is in use by another vllm-sentinel "
                f"(pid {holder or 'unknown'}): two daemons would overwrite each other's "
                "cursors; stop it, or give this one another defaults.state_directory"
            ) from error
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        self._lock_descriptor = descriptor

    def unlock(self) -> None:
        """Release the state directory (``lock``); nothing when it is not held."""
        descriptor, self._lock_descriptor = self._lock_descriptor, None
        if descriptor is not None:
            os.close(descriptor)

    def check_writable(self) -> None:
        """Create the directory if needed and prove a file can be written and synced there;
        remove temporary files a killed daemon left in the middle of a write.

        Raises:
            StateDirectoryError: it cannot (the message names the directory and the reason).
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            left = [
                *self.directory.glob(f".*{_SUFFIX}.*.tmp"),
                *self.directory.glob(".write-check.*"),
            ]
            for path in left:
                path.unlink(missing_ok=True)
            if left:
                _log.info("cursor_temporary_files_removed", count=len(left))
            descriptor, name = tempfile.mkstemp(prefix=".write-check.", dir=self.directory)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
                os.unlink(name)
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise StateDirectoryError.unwritable(self.directory, reason) from None

    # --- loading -------------------------------------------------------------------------

    def _read(self, host: str) -> str | None:
        path = self.path(host)
        legacy = self._legacy_path(host)
        if not path.exists() and legacy is not None and legacy.exists():
            try:
                os.replace(legacy, path)
                _log.info("cursor_file_renamed", host=host, old=legacy.name, new=path.name)
            except OSError as error:
                path = legacy  # read where it is; the next save writes the new name
                _log.warning("cursor_file_not_renamed", host=host, error=str(error))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            self._warn(host, "cursor_unreadable", error=str(error))
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self._warn(host, "cursor_unreadable", error="not UTF-8 text")
            return None

    def _warn(self, host: str, event: str, **details: Any) -> None:
        if host in self._warned:
            return
        self._warned.add(host)
        _log.warning(
            event,
            host=host,
            path=str(self.path(host)),
            detail="starting without a stored cursor: the backfill window is read as history",
            **details,
        )

    def load_state(self, host: str) -> HostState | None:
        """The state in the file of ``host``, or ``None``.

        An unreadable, empty or damaged file is logged once per host (``cursor_unreadable``)
        and read as no state.
        """
        text = self._read(host)
        if text is None:
            return None
        state = HostState.parse(text)
        if state is None:
            self._warn(host, "cursor_unreadable", error="no cursor in the file")
            return None
        with self._state_lock:
            self._saved.setdefault(host, state)
        return state

    def load(self, host: str) -> str | None:
        """The stored cursor of ``host``, or ``None`` (none stored, or unreadable)."""
        state = self.load_state(host)
        return state.cursor if state is not None else None

    # --- marking and saving --------------------------------------------------------------

    def mark(self, host: str, state: HostState | str) -> None:
        """Remember ``state`` (or a bare cursor) for ``host``: written at the next flush."""
        if isinstance(state, str):
            state = HostState(state)
        with self._state_lock:
            if self._marked.get(host) != state:
                self._marked[host] = state
                self._dirty.add(host)

    def marked(self, host: str) -> str | None:
        """The last cursor marked for ``host`` in this run."""
        state = self._marked.get(host)
        return state.cursor if state is not None else None

    def marked_state(self, host: str) -> HostState | None:
        """The last state marked for ``host`` in this run."""
        with self._state_lock:
            return self._marked.get(host)

    def saved(self, host: str) -> HostState | None:
        """What the file of ``host`` holds: the last state written, or the one read at start."""
        with self._state_lock:
            return self._saved.get(host)

    @property
    def pending(self) -> bool:
        """True while some marked state is not written yet."""
        with self._state_lock:
            return bool(self._dirty)

    async def flush(self) -> int:
        """Write every changed state atomically, in a worker thread.

        A flush still in flight (its caller may have been cancelled; its thread goes on) is
        waited for first, so the last flush called writes last.

        Returns:
            How many hosts' files were written; 0 when nothing changed or the write failed
            (counted, logged at most once a minute; the states stay pending for the next flush).
        """
        return await self._flush()

    def flush_sync(self) -> int:
        """The same as ``flush``, for threads and shutdown paths without an event loop.

        Blocks while another flush writes. Returns how many files were written (0 on a failed
        write, whose states stay pending); never raises ``OSError``.
        """
        with self._write_lock:
            with self._state_lock:
                pending = {host: self._marked[host] for host in self._dirty}
                self._dirty.clear()
            if not pending:
                return 0
            try:
                self._write_all(pending)
            except OSError as error:
                with self._state_lock:
                    self._dirty.update(pending)  # newer marks are dirty already
                self._failed(error)
                return 0
            with self._state_lock:
                self._saved.update(pending)
                self.saved_at = self._wall_clock()
                failed_before, self._failing = self._failing, False
            if failed_before:
                _log.info("cursor_saved", directory=str(self.directory), detail="writes work again")
            return len(pending)

    def _failed(self, error: OSError) -> None:
        with self._state_lock:
            self.failures_total += 1
            self._failing = True
        count = self._throttle.admit()
        if count is not None:
            _log.error(
                "cursor_save_failed",
                directory=str(self.directory),
                error=str(error),
                failures=count,
                failures_total=self.failures_total,
                detail=f"kept for the next flush; logged at most every "
                f"{FAILURE_LOG_INTERVAL_SECONDS:g} s",
            )

    def _write_all(self, pending: Mapping[str, HostState]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for host, state in pending.items():
            replace_file(self.path(host), state.text().encode())
        sync_directory(self.directory)
