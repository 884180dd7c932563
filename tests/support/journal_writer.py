"""Real systemd journal files for tests, written without journald.

Entries are serialised in the Journal Export Format
(https://systemd.io/JOURNAL_EXPORT_FORMATS/) and piped into
``systemd-journal-remote --output=DIR/NAME.journal -``, which writes an ordinary journal file
that the real ``journalctl --file=…`` reads (``/work/shared/TOOLCHAIN.md`` §Real journal files).

* ``encode_entry`` turns a mapping of fields into export-format bytes;
* ``JournalWriter`` owns one journal-remote child: ``write``/``flush`` append entries while a
  ``journalctl -f`` may be following the file, ``close`` waits for the child;
* ``service_line`` and ``manager_line`` build the two kinds of entries a systemd service
  produces: the service's own lines, and systemd's (PID 1) messages about the unit;
  ``unit_started``, ``unit_failed`` and ``other_unit_line`` the manager's lines tests write
  most (a start, a main process that exited 1) and an entry of an unrelated unit;
* ``LogClock`` gives log times (µs) as seconds from a base time.

Field names are checked against journald's grammar so a typo cannot silently vanish (an
invalid name makes journal-remote drop the field).
"""

from __future__ import annotations

import contextlib
import re
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import orjson

__all__ = [
    "JOURNAL_REMOTE",
    "MESSAGE_ID_DEACTIVATED",
    "MESSAGE_ID_FAILED",
    "MESSAGE_ID_MAIN_PROCESS_EXITED",
    "MESSAGE_ID_RESOURCES",
    "MESSAGE_ID_RESTART_SCHEDULED",
    "MESSAGE_ID_STARTED",
    "MESSAGE_ID_STARTING",
    "MESSAGE_ID_STOPPED",
    "MESSAGE_ID_STOPPING",
    "JournalWriter",
    "LogClock",
    "encode_entry",
    "manager_line",
    "other_unit_line",
    "parse_lines",
    "read_journal",
    "service_line",
    "to_realtime_us",
    "unit_failed",
    "unit_started",
]

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"

# systemd catalog ids (catalog/systemd.catalog.in) of the manager's unit messages.
MESSAGE_ID_STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
MESSAGE_ID_STARTED = "39f53479d3a045ac8e11786248231fbf"
MESSAGE_ID_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
MESSAGE_ID_STOPPED = "9d1aaa27d60140bd96365438aad20286"
MESSAGE_ID_MAIN_PROCESS_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
MESSAGE_ID_DEACTIVATED = "7ad2d189f7e94e70a38c781354912448"
MESSAGE_ID_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"  # "Failed with result '…'."
MESSAGE_ID_RESOURCES = "ae8f7b866b0347b9af31fe1c80b127c0"  # "Consumed … CPU time."
MESSAGE_ID_RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"

_FIELD_NAME = re.compile(r"^(?:__REALTIME_TIMESTAMP|__MONOTONIC_TIMESTAMP|_?[A-Z0-9][A-Z0-9_]*)$")
_MAX_FIELD_NAME = 64
_DEFAULT_HOSTNAME = "llm-test"
_DEFAULT_BOOT_ID = "5b3a1c0d9e8f47a6b2c4d6e8f0a1b3c5"


def to_realtime_us(moment: datetime) -> int:
    """Microseconds since the epoch for an aware datetime (journald's ``__REALTIME_TIMESTAMP``)."""
    if moment.tzinfo is None:
        raise ValueError("realtime_us needs a timezone-aware datetime")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _needs_binary_form(value: bytes) -> bool:
    """True unless ``value`` is valid UTF-8 without control characters (tab allowed)."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return any((ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F for char in text)


def encode_entry(fields: Mapping[str, str | bytes | int]) -> bytes:
    """Serialise one journal entry in the Journal Export Format.

    Text fields become ``KEY=value\\n``; a value holding a newline, any other control
    character, or bytes that are not UTF-8 uses the binary-safe form ``KEY\\n`` + 64-bit
    little-endian length + bytes + ``\\n``. A blank line ends the entry. Set
    ``__REALTIME_TIMESTAMP`` (µs since the epoch, ``int`` or digits) to control log time;
    journal-remote requires it.
    """
    if "__REALTIME_TIMESTAMP" not in fields:
        raise ValueError("an entry needs __REALTIME_TIMESTAMP (journal-remote requires it)")
    out = bytearray()
    for name, value in fields.items():
        if len(name) > _MAX_FIELD_NAME or not _FIELD_NAME.match(name):
            raise ValueError(f"invalid journal field name: {name!r}")
        if isinstance(value, bool):
            raise TypeError(f"{name}: bool is not a journal value")
        if isinstance(value, int):
            data = str(value).encode("ascii")
        elif isinstance(value, str):
            data = value.encode("utf-8", errors="surrogateescape")
        else:
            data = bytes(value)
        key = name.encode("ascii")
        if _needs_binary_form(data):
            out += key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key + b"=" + data + b"\n"
    out += b"\n"
    return bytes(out)


def service_line(
    unit: str,
    invocation_id: str,
    pid: int,
    message: str | bytes,
    realtime_us: int,
    identifier: str = "python3",
    *,
    priority: int = 6,
    hostname: str = _DEFAULT_HOSTNAME,
    boot_id: str = _DEFAULT_BOOT_ID,
    extra: Mapping[str, str | bytes | int] | None = None,
) -> dict[str, str | bytes | int]:
    """An entry a service process wrote to stdout/stderr, as journald stores it."""
    entry: dict[str, str | bytes | int] = {
        "__REALTIME_TIMESTAMP": realtime_us,
        "_BOOT_ID": boot_id,
        "_HOSTNAME": hostname,
        "_TRANSPORT": "stdout",
        "_PID": pid,
        "_UID": 0,
        "_GID": 0,
        "_COMM": identifier[:15],
        "_SYSTEMD_CGROUP": f"/system.slice/{unit}",
        "_SYSTEMD_SLICE": "system.slice",
        "_SYSTEMD_UNIT": unit,
        "_SYSTEMD_INVOCATION_ID": invocation_id,
        "SYSLOG_IDENTIFIER": identifier,
        "SYSLOG_FACILITY": 3,
        "PRIORITY": priority,
        "MESSAGE": message,
    }
    if extra:
        entry.update(extra)
    return entry


def manager_line(
    unit: str,
    invocation_id: str,
    message: str,
    message_id: str | None,
    realtime_us: int,
    *,
    priority: int = 6,
    hostname: str = _DEFAULT_HOSTNAME,
    boot_id: str = _DEFAULT_BOOT_ID,
    extra: Mapping[str, str | bytes | int] | None = None,
) -> dict[str, str | bytes | int]:
    """An entry systemd (PID 1) wrote about ``unit`` (``UNIT=``, ``INVOCATION_ID=``)."""
    entry: dict[str, str | bytes | int] = {
        "__REALTIME_TIMESTAMP": realtime_us,
        "_BOOT_ID": boot_id,
        "_HOSTNAME": hostname,
        "_TRANSPORT": "journal",
        "_PID": 1,
        "_UID": 0,
        "_GID": 0,
        "_COMM": "systemd",
        "_EXE": "/usr/lib/systemd/systemd",
        "_SYSTEMD_CGROUP": "/init.scope",
        "_SYSTEMD_SLICE": "-.slice",
        "_SYSTEMD_UNIT": "init.scope",
        "SYSLOG_IDENTIFIER": "systemd",
        "SYSLOG_FACILITY": 3,
        "PRIORITY": priority,
        "CODE_FILE": "src/core/unit.c",
        "UNIT": unit,
        "INVOCATION_ID": invocation_id,
        "MESSAGE": message,
    }
    if message_id is not None:
        entry["MESSAGE_ID"] = message_id
    if extra:
        entry.update(extra)
    return entry


def unit_started(
    unit: str,
    invocation_id: str,
    realtime_us: int,
    description: str | None = None,
    **fields: Any,
) -> dict[str, str | bytes | int]:
    """systemd's ``Started UNIT.`` (``Started UNIT - DESCRIPTION.`` with a description), with
    its catalog MESSAGE_ID: an incarnation begins (``fields``: ``manager_line``'s keywords)."""
    text = f"Started {unit} - {description}." if description else f"Started {unit}."
    return manager_line(unit, invocation_id, text, MESSAGE_ID_STARTED, realtime_us, **fields)


def unit_failed(
    unit: str, invocation_id: str, realtime_us: int
) -> list[dict[str, str | bytes | int]]:
    """systemd's two lines when the main process exits 1: ``Main process exited,
    code=exited, status=1/FAILURE`` and ``Failed with result 'exit-code'.`` (no MESSAGE_ID)."""
    return [
        manager_line(
            unit,
            invocation_id,
            f"{unit}: Main process exited, code=exited, status=1/FAILURE",
            None,
            realtime_us,
        ),
        manager_line(
            unit, invocation_id, f"{unit}: Failed with result 'exit-code'.", None, realtime_us
        ),
    ]


def other_unit_line(realtime_us: int) -> dict[str, str | bytes | int]:
    """A line of an unrelated unit (sshd's login): a journal's first entry, so that the file
    exists before a daemon follows it, without any vLLM unit in it."""
    return service_line("sshd.service", "9" * 32, 77, "Accepted publickey", realtime_us)


class LogClock:
    """Log times from ``base``: now, or ``ago`` before now.

    Attributes:
        base: the time of second 0 (aware, UTC).
    """

    def __init__(self, ago: timedelta = timedelta(0)) -> None:
        self.base = datetime.now(UTC) - ago

    def at(self, seconds: float) -> datetime:
        """``base`` + ``seconds``."""
        return self.base + timedelta(seconds=seconds)

    def us(self, seconds: float) -> int:
        """``base`` + ``seconds`` as journald's ``__REALTIME_TIMESTAMP`` (µs)."""
        return to_realtime_us(self.base + timedelta(seconds=seconds))


def read_journal(
    path: Path | str, *, journalctl: str = "journalctl", all_fields: bool = True
) -> list[bytes]:
    """Run ``journalctl --file=PATH -o json [-a] -n all`` and return its output lines."""
    argv = [journalctl, f"--file={path}", "-o", "json", "-n", "all", "--no-pager"]
    if all_fields:
        argv.append("-a")
    result = subprocess.run(argv, capture_output=True, check=False, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"{argv} exit {result.returncode}: {result.stderr.decode()[-2000:]}")
    return [line for line in result.stdout.split(b"\n") if line.strip()]


class JournalWriter:
    """One ``systemd-journal-remote`` child writing ``DIRECTORY/NAME.journal``.

    Entries go to the child's stdin; ``flush`` pushes them through the pipe. The file exists
    (and is readable by ``journalctl``) once the first entry is processed. ``close`` ends
    stdin and waits for the child, raising if it failed. Each file takes 8 MiB of disk.

    Attributes:
        path: the journal file.
        entries_written: entries handed to the child so far.
    """

    def __init__(
        self,
        directory: Path | str,
        name: str = "test",
        *,
        binary: str = JOURNAL_REMOTE,
        journalctl: str = "journalctl",
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.@-]+", name):
            raise ValueError(f"journal file name must be plain: {name!r}")
        self.path = Path(directory) / f"{name}.journal"
        self.entries_written = 0
        self._journalctl = journalctl
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._process = subprocess.Popen(
            [binary, f"--output={self.path}", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.returncode: int | None = None

    def write(self, entries: Iterable[Mapping[str, str | bytes | int]]) -> None:
        """Append entries (buffered until ``flush``)."""
        stdin = self._process.stdin
        if stdin is None or stdin.closed:
            raise RuntimeError("JournalWriter is closed")
        for entry in entries:
            stdin.write(encode_entry(entry))
            self.entries_written += 1

    def flush(self) -> None:
        """Hand everything written so far to journal-remote."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:
            stdin.flush()

    def write_and_flush(self, entries: Iterable[Mapping[str, str | bytes | int]]) -> None:
        """``write`` then ``flush``."""
        self.write(entries)
        self.flush()

    def write_readable(self, entries: Iterable[Mapping[str, str | bytes | int]]) -> list[bytes]:
        """``write_and_flush``, then ``wait_until_readable`` for every entry written so far;
        returns them as ``journalctl -o json`` lines."""
        self.write_and_flush(entries)
        return self.wait_until_readable(self.entries_written)

    def wait_until_readable(self, n_entries: int, timeout: float = 10.0) -> list[bytes]:
        """Poll ``journalctl`` until at least ``n_entries`` entries are readable; return them.

        Polls every 20 ms with a deadline (no fixed sleep as synchronisation); raises
        ``TimeoutError`` naming what was seen, or ``RuntimeError`` if journal-remote died.
        """
        self.flush()
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            if self.path.exists():
                lines = read_journal(self.path, journalctl=self._journalctl)
                seen = len(lines)
                if seen >= n_entries:
                    return lines
            code = self._process.poll()
            if code is not None:
                raise RuntimeError(f"journal-remote exited ({code}): {self._stderr_text()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.path}: {seen} of {n_entries} entries after {timeout}s")
            time.sleep(0.02)  # poll interval, bounded by the deadline above

    def close(self, timeout: float = 30.0) -> int:
        """End input, wait for journal-remote; raise ``RuntimeError`` if it failed."""
        if self.returncode is None:
            stdin = self._process.stdin
            if stdin is not None and not stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    stdin.close()
            try:
                self.returncode = self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self.returncode = self._process.wait()
            stderr = self._stderr_text()
            self._stderr.close()
            if self.returncode != 0:
                raise RuntimeError(f"journal-remote exited {self.returncode}: {stderr}")
        return self.returncode

    def _stderr_text(self) -> str:
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode("utf-8", errors="replace")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the test's own failure with a close error
            with contextlib.suppress(RuntimeError):
                self.close()


def parse_lines(lines: Iterable[bytes]) -> list[dict[str, object]]:
    """Parse ``journalctl -o json`` lines (convenience for assertions)."""
    return [orjson.loads(line) for line in lines]
