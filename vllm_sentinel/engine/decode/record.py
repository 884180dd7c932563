"""The ``Record``: one log line with what its source knows about it (core: pure, no I/O).

Records flow one way: a decoder (``journal_json``, ``text_log``) makes them, a
``UnitTracker`` consumes them. Only ``message`` is required; everything else is ``None`` when
the source does not say.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

__all__ = ["Record"]


class Record(NamedTuple):
    """One log record.

    A ``NamedTuple`` rather than a dataclass: records are made millions of times a minute on a
    busy host, and a tuple is the cheapest immutable value Python has.

    Attributes:
        message: the text of the line, decoded (invalid UTF-8 replaced), wrapper stripped.
            May hold several physical lines separated by ``\\n``; the tracker reads each.
        realtime: when the line was logged, timezone-aware UTC; ``None`` when the source
            has no time (the tracker then falls back to vLLM's own header time).
        host: the host the record came from (config name), if known.
        unit: the systemd unit the record is about: ``UNIT=`` for messages systemd writes
            about a unit, else ``_SYSTEMD_UNIT``.
        invocation_id: the systemd invocation id (``INVOCATION_ID=`` or
            ``_SYSTEMD_INVOCATION_ID``), 32 hex digits.
        pid: the writing process (``_PID``, or the ``ident[pid]`` of journald short text).
        syslog_identifier: ``SYSLOG_IDENTIFIER`` (``systemd``, ``python3``, ``bash``…).
        priority: syslog priority 0–7 (``PRIORITY``).
        cursor: the journal cursor (``__CURSOR``), opaque.
        message_id: the catalog ``MESSAGE_ID`` of systemd's own messages.
        from_manager: True when systemd (the service manager) wrote the line about the unit.
        stream: journald's ``_STREAM_ID`` (the stdout/stderr stream systemd opened for one
            start of the unit, 32 hex digits): a process left over from an earlier start
            still writes on that start's stream, whatever invocation id journald stamps.
        dropped: for journald's own ``Suppressed N messages from UNIT`` entry about the
            unit (``N_DROPPED``), the number of its messages journald dropped.
        machine: the machine that logged it (journald's ``_HOSTNAME``), ``None`` when the
            source does not say (text logs). One journal can hold several machines (a
            ``systemd-journal-remote`` directory); ``TrackerSet`` keeps their units apart.
    """

    message: str
    realtime: datetime | None = None
    host: str | None = None
    unit: str | None = None
    invocation_id: str | None = None
    pid: int | None = None
    syslog_identifier: str | None = None
    priority: int | None = None
    cursor: str | None = None
    message_id: str | None = None
    from_manager: bool = False
    stream: str | None = None
    dropped: int | None = None
    machine: str | None = None
