"""Build ``Record``s for tests without a journal: the fields journald would set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.engine.decode.record import Record

T0 = datetime(2026, 11, 28, 23, 35, 0, tzinfo=UTC)
UNIT = "vllm-kimi-k25.service"


class Journal:
    """Hands out records with increasing cursors (one seqnum space) and log times."""

    def __init__(self, unit: str = UNIT, host: str = "llm-two", start: datetime = T0) -> None:
        self.unit = unit
        self.host = host
        self.now = start
        self.seqnum = 0

    def at(self, seconds: float) -> Journal:
        """Move the log clock to T0 + ``seconds``."""
        self.now = T0 + timedelta(seconds=seconds)
        return self

    def _cursor(self) -> str:
        self.seqnum += 1
        return f"s=0123456789abcdef0123456789abcdef;i={self.seqnum:x};b=00;m=0;t=0;x=0"

    def line(self, message: str, invocation: str | None, pid: int = 1000) -> Record:
        """A line the service wrote (``_SYSTEMD_UNIT``, ``_SYSTEMD_INVOCATION_ID``)."""
        return Record(
            message, self.now, self.host, self.unit, invocation, pid, "python3", 6, self._cursor()
        )

    def systemd(self, message: str, invocation: str | None) -> Record:
        """A line systemd wrote about the unit (``UNIT=``, ``INVOCATION_ID=``)."""
        return Record(
            message,
            self.now,
            self.host,
            self.unit,
            invocation,
            1,
            "systemd",
            6,
            self._cursor(),
            None,
            True,
        )
