"""Unit selection: configured names and globs, never the sentinel's own unit by a glob."""

from __future__ import annotations

import pytest

from tests.support.records import Journal
from vllm_sentinel.engine.tracker import TrackerSet
from vllm_sentinel.engine.unit_selection import is_own_unit, selects


class TestSelects:
    @pytest.mark.parametrize("glob", ["vllm*.service", "vllm-*.service", "*.service", "*"])
    def test_a_glob_never_selects_the_sentinels_own_unit(self, glob: str) -> None:
        """The documented install's unit, and its variants, are no vLLM servers."""
        for unit in ("vllm-sentinel.service", "vllm-sentinel-central.service"):
            assert is_own_unit(unit)
            assert not selects([glob], unit)
        assert selects([glob], "vllm-kimi-k25.service")

    def test_an_exact_name_selects_it(self) -> None:
        """Named exactly (no glob characters), even the sentinel's unit is watched."""
        assert selects(["vllm*.service", "vllm-sentinel.service"], "vllm-sentinel.service")

    def test_names_and_globs_as_fnmatch(self) -> None:
        assert selects(["vllm.service"], "vllm.service")
        assert not selects(["vllm.service"], "vllm2.service")
        assert selects(["vllm-[ab].service"], "vllm-a.service")
        assert not selects(["vllm-*.service"], "vllm.service")
        assert is_own_unit("vllm-sentinelx.service")  # a prefix: vllm-sentinel*
        assert not is_own_unit("vllm-sentinal.service")


class TestTrackerSet:
    def test_records_of_the_sentinels_own_unit_are_not_routed(self) -> None:
        """The daemon's own log lines never make a vLLM unit (VllmNotReady for itself)."""
        trackers = TrackerSet(["vllm*.service"])
        own = Journal(unit="vllm-sentinel.service")
        assert not trackers.feed(own.at(1).line("journal_units_changed host=llm-one", "a" * 32))
        assert trackers.unrouted_total == 1
        assert trackers.feed(Journal().at(2).line("INFO x", "b" * 32))
        assert [tracker.unit for tracker in trackers] == ["vllm-kimi-k25.service"]


class TestRateLimited:
    """journald's ``Suppressed N messages`` entries (``Record.dropped``)."""

    def test_counted_for_kept_units_only_and_never_fed(self) -> None:
        trackers = TrackerSet(["vllm-*.service"])
        journal = Journal(unit="vllm-burst.service")
        burst = journal.at(1).line("Suppressed 2827 messages from vllm-burst.service", None, 47)
        assert trackers.feed(burst._replace(dropped=2827))
        assert not trackers.feed(burst._replace(dropped=5, unit="cron.service"))
        assert trackers.rate_limited == {"vllm-burst.service": 2827}
        (tracker,) = trackers
        snapshot = tracker.snapshot()
        assert snapshot.incarnations == () and dict(snapshot.records_by_level) == {}

    def test_an_entry_read_twice_counts_once(self) -> None:
        """The backfill of a unit found while following and the follow may both read it."""
        trackers = TrackerSet(["vllm-*.service"])
        record = Journal(unit="vllm-burst.service").at(1).line("Suppressed 9", None, 47)
        trackers.feed_many([record._replace(dropped=9)] * 2)
        assert trackers.rate_limited == {"vllm-burst.service": 9}

    def test_history_is_not_counted_again(self) -> None:
        """What an earlier run of the daemon read (history) was counted by that run."""
        trackers = TrackerSet(["vllm-*.service"])
        journal = Journal(unit="vllm-burst.service")
        trackers.counting = False
        trackers.feed(journal.at(1).line("Suppressed 3", None, 47)._replace(dropped=3))
        trackers.counting = True
        trackers.feed(journal.at(2).line("Suppressed 4", None, 47)._replace(dropped=4))
        assert trackers.rate_limited == {"vllm-burst.service": 4}

    def test_the_host_total_never_goes_down(self) -> None:
        """A unit removed (or a reload's new set) keeps what was counted: a counter."""
        trackers = TrackerSet(["vllm-*.service"])
        record = Journal(unit="vllm-burst.service").at(1).line("Suppressed 9", None, 47)
        trackers.feed(record._replace(dropped=9))
        trackers.remove(record.host, "vllm-burst.service")
        assert trackers.rate_limited_total == 9
        reloaded = TrackerSet(["vllm-burst.service"])
        reloaded.carry_counts(trackers)
        assert (reloaded.rate_limited_total, reloaded.rate_limited) == (
            9,
            {"vllm-burst.service": 9},
        )
