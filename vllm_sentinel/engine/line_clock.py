"""The time of a log line that has none of its own (core: pure).

Journal records carry ``__REALTIME_TIMESTAMP``; a pasted text line often has only vLLM's
header stamp, ``MM-DD HH:MM:SS`` without a year (``INFO 05-01 12:00:00 [file.py:12]``, vLLM
0.4–0.33, ``vllm/logger.py``), or a JSON record's ``asctime`` with a full date (0.32+). A
``LineClock`` turns those into UTC times: the year comes from the last full time seen (or the
reference year), a stamp more than half a year before the last time is in the next year (a log
across New Year), and a line without any stamp takes the last time. Given ``not_after`` (the
replay's now, as a wall time), a stamp without a year never lands after it: it takes the latest
year that keeps it there (``text_log.latest_year_not_after``, as journald's short stamps).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from vllm_sentinel.engine.decode.text_log import latest_year_not_after

__all__ = ["LineClock"]

_HALF_YEAR: Final = timedelta(days=180)
_HEADER_STAMP_LENGTH: Final = len("MM-DD HH:MM:SS")


class LineClock:
    """Log time for lines without a record time.

    Args:
        reference_year: the year of stamps without one until a full time is seen.
        not_after: no stamp without a year is put after this time (a wall time, as the
            stamps are read); ``None``: no bound.

    Attributes:
        last_time: the time of the last line (``observe`` or a stamp read).
        year: the year given to stamps without one.
    """

    def __init__(self, reference_year: int = 1970, *, not_after: datetime | None = None) -> None:
        self.last_time: datetime | None = None
        self.year = reference_year
        self._not_after = not_after
        self._stamp_text: str | None = None  # the last header stamp read, and its time
        self._stamp_time: datetime | None = None
        self._stamp_year = 0

    def observe(self, time: datetime) -> None:
        """A record with its own full time: it sets the last time and the year."""
        self.last_time = time
        self.year = time.year

    def line_time(self, stamp: str | None) -> datetime | None:
        """The time of a line with header ``stamp`` (``None``: no stamp, the last time)."""
        if stamp is None:
            return self.last_time
        last = self.last_time
        if stamp == self._stamp_text and last is self._stamp_time and self.year == self._stamp_year:
            return last  # the same second as the line before: the same result
        if len(stamp) != _HEADER_STAMP_LENGTH:
            return self._dated(stamp)
        try:
            time = datetime(
                self.year,
                int(stamp[0:2]),
                int(stamp[3:5]),
                int(stamp[6:8]),
                int(stamp[9:11]),
                int(stamp[12:14]),
                tzinfo=UTC,
            )
        except ValueError:
            return last
        if last is not None and last - time > _HALF_YEAR:
            try:
                time = time.replace(year=time.year + 1)
            except ValueError:  # past year 9999, or 29 February into a common year
                return last
        bounded = latest_year_not_after(time, self._not_after)
        if bounded is None:
            return last
        time = bounded
        self.last_time = time
        self._stamp_text, self._stamp_time, self._stamp_year = stamp, time, self.year
        return time

    def _dated(self, stamp: str) -> datetime | None:
        """The time of a stamp with a full date (a JSON record's ``asctime``), else the last.

        Without a zone the stamp is read as UTC, as vLLM's header is; its year becomes the year
        of the stamps that have none.
        """
        try:
            time = datetime.fromisoformat(stamp)
            time = time.replace(tzinfo=UTC) if time.tzinfo is None else time.astimezone(UTC)
        except (ValueError, OverflowError):  # OverflowError: year 1 with a positive offset
            return self.last_time
        self.year = time.year
        self.last_time = time
        self._stamp_text, self._stamp_time, self._stamp_year = stamp, time, self.year
        return time
