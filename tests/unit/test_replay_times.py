"""The times of a replayed text log: a stamp without a year is never put after the replay's
now, and a time whose log named no zone is written without one (ISO 8601 local time).

vLLM's header (``INFO 12-28 18:02:56``) and journald's short format (``Dec 28 18:02:56``) carry
no year and no zone: the host's local time as printed. A new user's trial, replaying in early
December a log from the last days of December, read its times as that month of this year (in
the future) and written with a ``Z``, as if UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from vllm_sentinel.engine.decode.text_log import TextLogDecoder, latest_year_not_after
from vllm_sentinel.engine.line_clock import LineClock
from vllm_sentinel.engine.report import to_json, unit_to_json
from vllm_sentinel.replay import replay

NOW = datetime(2026, 12, 2, 7, 0, 0, tzinfo=UTC)
"""When the replay runs (the CLI's ``datetime.now(UTC)``)."""


def _vllm(stamp: str, text: str) -> str:
    return f"INFO {stamp} [api_server.py:1] {text}"


def _log(*lines: str) -> list[list[bytes]]:
    return [["\n".join(lines).encode() + b"\n"]]


START = "vLLM API server version 0.11.0"
LOAD = "Starting to load model foo/bar..."


def _started(*lines: str, now: datetime = NOW) -> datetime | None:
    (unit,) = replay(_log(*lines), reference_year=now.year, now=now).units
    return unit.incarnations[0].started_at


class TestNoTimeAfterNow:
    def test_a_day_later_in_the_year_than_now_is_last_year(self) -> None:
        """``12-28`` replayed on 2 December 2026: 28 December 2025, the latest year that
        keeps it before now (2026 would be 26 days in the future)."""
        started = _started(_vllm("12-28 18:02:56", START), _vllm("12-28 18:03:00", LOAD))
        assert started == datetime(2025, 12, 28, 18, 2, 56, tzinfo=UTC)

    def test_an_earlier_day_keeps_this_year(self) -> None:
        assert _started(_vllm("11-04 18:02:56", START)) == datetime(
            2026, 11, 4, 18, 2, 56, tzinfo=UTC
        )

    def test_later_today_by_less_than_the_furthest_zone_keeps_this_year(self) -> None:
        """20:00 on 2 December, read at 07:00 UTC: a host at UTC+13 prints that wall time
        now, so it is not the future (its zone is unknown: up to 14 hours ahead of UTC)."""
        assert _started(_vllm("12-02 20:00:00", START)) == datetime(2026, 12, 2, 20, tzinfo=UTC)
        assert _started(_vllm("12-02 21:00:01", START)) == datetime(
            2025, 12, 2, 21, 0, 1, tzinfo=UTC
        )

    def test_a_log_across_new_year_read_just_after_it(self) -> None:
        """31 December then 1 January, replayed on 1 January 2026: the first stamp is last
        year's, the rollover makes the second this year's, and the phase lasts 2 minutes."""
        now = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
        (unit,) = replay(
            _log(_vllm("12-31 23:59:00", START), _vllm("01-01 00:01:00", LOAD)),
            reference_year=now.year,
            now=now,
        ).units
        starting, loading = unit.incarnations[0].phases[:2]
        assert starting.entered_at == datetime(2025, 12, 31, 23, 59, tzinfo=UTC)
        assert loading.entered_at == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)

    def test_journald_short_stamps_too(self) -> None:
        """``Dec 28 18:02:56 host vllm[1]: …`` (``journalctl`` without ``-o``): the same rule."""
        started = _started(
            "Dec 28 18:02:56 gpu-3 vllm[4242]: " + _vllm("12-28 18:02:56", START),
            "Dec 28 18:03:00 gpu-3 vllm[4242]: " + _vllm("12-28 18:03:00", LOAD),
        )
        assert started == datetime(2025, 12, 28, 18, 2, 56, tzinfo=UTC)

    def test_a_full_date_is_kept_as_written(self) -> None:
        """A stamp with its year (a JSON record's ``asctime``, ``docker logs -t``) is the
        log's own word: no year is assumed, even one ahead of now."""
        line = "2027-01-05T10:00:00.000000000Z " + _vllm("01-05 10:00:00", START)
        assert _started(line) == datetime(2027, 1, 5, 10, tzinfo=UTC)

    def test_without_now_the_reference_year_as_before(self) -> None:
        """``now=None`` (tests, benchmarks): the reference year only, no bound."""
        (unit,) = replay(_log(_vllm("12-28 18:02:56", START)), reference_year=2026).units
        assert unit.incarnations[0].started_at == datetime(2026, 12, 28, 18, 2, 56, tzinfo=UTC)

    def test_the_line_clock_takes_the_latest_year_not_after(self) -> None:
        bound = datetime(2027, 1, 10, tzinfo=UTC)
        clock = LineClock(2027, not_after=bound)
        assert clock.line_time("12-28 10:00:00") == datetime(2026, 12, 28, 10, tzinfo=UTC)
        assert clock.line_time("01-09 10:00:00") == datetime(2027, 1, 9, 10, tzinfo=UTC)

    def test_29_february_goes_back_to_a_leap_year(self) -> None:
        """The latest year that keeps 29 February before the bound is a leap year."""
        leap = datetime(2028, 2, 29, 10, tzinfo=UTC)
        assert latest_year_not_after(leap, datetime(2027, 1, 10, tzinfo=UTC)) == leap.replace(
            year=2024
        )
        assert latest_year_not_after(leap, None) is leap
        assert latest_year_not_after(leap, leap) is leap

    def test_the_text_decoder_takes_the_latest_year_not_after(self) -> None:
        decoder = TextLogDecoder(reference_year=2026, not_after=NOW + timedelta(hours=14))
        (record,) = [*decoder.feed(b"Dec 28 18:02:56 gpu-3 vllm[4242]: hello\n"), *decoder.flush()]
        assert record.realtime == datetime(2025, 12, 28, 18, 2, 56, tzinfo=UTC)


class TestTimesWithoutAZone:
    def test_text_times_are_written_as_printed_without_z(self) -> None:
        """Plain text's times are the host's local time (its zone unknown): JSON writes them
        as ISO 8601 local times, no ``Z`` and no offset, and ``log_times_local`` says so."""
        (unit,) = replay(
            _log(
                _vllm("11-04 18:02:56", START),
                _vllm("11-04 18:02:58", LOAD),
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/worker.py", line 1, in load',
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ),
            reference_year=2026,
            now=NOW,
        ).units
        document = unit_to_json(unit)
        assert document["log_times_local"] is True
        (item,) = document["incarnations"]
        assert item["started_at"] == "2026-11-04T18:02:56"
        assert [phase["entered_at"] for phase in item["phases"]][:2] == [
            "2026-11-04T18:02:56",
            "2026-11-04T18:02:58",
        ]
        assert item["crash"]["at"] == "2026-11-04T18:02:58"
        assert document["last_crash"]["at"] == "2026-11-04T18:02:58"
        assert document["last_progress_at"] == "2026-11-04T18:02:58"

    def test_times_with_their_zone_keep_utc(self) -> None:
        """``docker logs -t`` stamps name their zone: real times, written in UTC with ``Z``."""
        (unit,) = replay(
            _log("2026-11-04T18:02:56.250000000+01:00 " + _vllm("11-04 18:02:56", START)),
            reference_year=2026,
            now=NOW,
        ).units
        document = to_json([unit])["units"][0]
        assert document["log_times_local"] is False
        assert document["incarnations"][0]["started_at"] == "2026-11-04T17:02:56.250000Z"

    def test_the_status_table_does_not_call_a_zone_less_time_utc(self) -> None:
        """``status``'s words for a time without a zone (a replayed text's, ``iso_time``) give
        the clock as printed, not ``… UTC``; a time with ``Z`` keeps ``UTC``."""
        from vllm_sentinel.engine.report import eta_text

        local = eta_text(59.0, "2026-06-07T08:56:59", "history", None)
        utc = eta_text(59.0, "2026-06-07T08:56:59Z", "history", None)
        assert local is not None and "ready at 08:56:59," in local
        assert utc is not None and "ready at 08:56:59 UTC," in utc
