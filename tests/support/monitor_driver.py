"""Drive a ``Monitor`` synchronously in edge tests: a clock the test sets, recorded journals
replayed record by record.

``ManualClock`` is the Monitor's ``clock``: it says ``at`` until the test moves it. ``play``
applies records the way the journal source hands them over, one ``JournalBatch`` each, with the
clock set to the record's log time and a publish after each, so a test can stop at any moment
of a recorded incident. ``journal_records`` decodes a ``journalctl -o json`` file of
``tests/golden/journal`` (``KIMI_INCIDENT``: the flashinfer crash, then a nine-minute load);
``events`` picks the Monitor's log events of one name out of structlog's ``capture_logs``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.monitor import Monitor
from vllm_sentinel.sources.journal import JournalBatch

__all__ = ["KIMI_INCIDENT", "ManualClock", "events", "journal_records", "play"]

KIMI_INCIDENT = (
    Path(__file__).resolve().parents[1]
    / "golden"
    / "journal"
    / "001-kimi-k25-flashinfer-restart.jsonl"
)


class ManualClock:
    """A clock for ``Monitor(clock=…)`` that reads ``at`` (set it to move time)."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def journal_records(path: Path, host: str) -> list[Record]:
    """Every record of a ``journalctl -o json`` file, decoded for ``host``."""
    decoder = JournalJsonDecoder(host)
    return [*decoder.feed(path.read_bytes()), *decoder.flush()]


def play(
    monitor: Monitor,
    clock: ManualClock,
    records: list[Record],
    *,
    until: datetime | None = None,
    **batch: Any,
) -> None:
    """Apply ``records`` one batch each (``batch``: more ``JournalBatch`` fields) at their log
    time, publishing after each; stop before the first record later than ``until``."""
    for record in records:
        assert record.realtime is not None and record.host is not None
        if until is not None and record.realtime > until:
            break
        clock.at = record.realtime
        monitor.apply(JournalBatch(record.host, (record,), record.cursor, **batch))
        monitor.publish()


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The captured log events named ``name``, in order."""
    return [event for event in logs if event["event"] == name]
