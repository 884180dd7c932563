"""vLLM's tqdm bars as the tracker reads them: remaining time, shard rate, a start seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.eta import log_remaining_seconds
from vllm_sentinel.engine.snapshot import IncarnationSnapshot
from vllm_sentinel.engine.tracker import UnitTracker

A = "a" * 32
TP0 = "(Worker_TP0 pid=221343) "
LOAD = TP0 + "INFO 11-28 23:35:10 [gpu_model_runner.py:3425] Starting to load model m..."


def _shards(done: int, total: int, elapsed: str, remaining: str, rate: str) -> str:
    """One refresh of vLLM's shard bar, as the journal stores it (worker prefix, then ``\\r``)."""
    percent = f"{100 * done / total:3.0f}"
    return (
        f"{TP0}\rLoading safetensors checkpoint shards: {percent}% Completed | "
        f"{done}/{total} [{elapsed}<{remaining}, {rate}]"
    )


def _current(tracker: UnitTracker) -> IncarnationSnapshot:
    current = tracker.snapshot().current
    assert current is not None
    return current


class TestShardBar:
    """Each refresh of the shard bar: tqdm's remaining time and the measured rate."""

    def test_remaining_time_of_the_last_refresh(self) -> None:
        """'[09:23<29:54, 28.49s/it]' → 1794 s left at that line's time."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.at(0).systemd("Started u.", A))
        tracker.feed(journal.at(10).line(LOAD, A))
        tracker.feed(journal.at(573).line(_shards(22, 85, "09:23", "29:54", "28.49s/it"), A))
        current = _current(tracker)
        bar = current.progress.bar
        assert bar is not None
        assert (bar.phase, bar.done, bar.total, bar.remaining_seconds) == (
            Phase.LOADING_WEIGHTS,
            22,
            85,
            1794.0,
        )
        assert bar.at == T0 + timedelta(seconds=573)
        assert log_remaining_seconds(current, T0 + timedelta(seconds=600)) == 1767.0

    def test_hours_in_tqdm_intervals(self) -> None:
        """tqdm writes H:MM:SS past an hour."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.at(10).line(LOAD, A))
        tracker.feed(journal.at(20).line(_shards(1, 142, "00:34", "1:21:09", "34.95s/it"), A))
        bar = _current(tracker).progress.bar
        assert bar is not None and bar.remaining_seconds == 3600 + 21 * 60 + 9

    def test_measured_rate_from_first_reading_and_last_growth(self) -> None:
        """First reading 0/10 at 20 s, 4/10 first seen at 60 s: 0.1 shard/s, 60 s left then."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.at(10).line(LOAD, A))
        tracker.feed(journal.at(20).line(_shards(0, 10, "00:00", "?", "?it/s"), A))
        tracker.feed(journal.at(40).line(_shards(2, 10, "00:20", "?", "?it/s"), A))
        tracker.feed(journal.at(60).line(_shards(4, 10, "00:40", "?", "?it/s"), A))
        tracker.feed(journal.at(65).line(_shards(4, 10, "00:45", "?", "?it/s"), A))  # same
        current = _current(tracker)
        progress = current.progress
        assert progress.weights_progress_first_at == T0 + timedelta(seconds=20)
        assert progress.weights_progress_first_loaded == 0
        assert progress.weights_progress_at == T0 + timedelta(seconds=60)
        assert progress.bar is not None and progress.bar.remaining_seconds is None
        assert log_remaining_seconds(current, T0 + timedelta(seconds=70)) == 50.0

    def test_a_new_bar_restarts_the_measurement(self) -> None:
        """Prefetching 10/10 files, then the loading bar from 0: measured from the new bar."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.at(10).line(LOAD, A))
        prefetch = TP0 + "INFO 11-28 23:35:20 [weight_utils.py:1] Prefetching checkpoint files: "
        tracker.feed(journal.at(20).line(prefetch + "100% (10/10)", A))
        tracker.feed(journal.at(30).line(_shards(0, 10, "00:00", "?", "?it/s"), A))
        progress = _current(tracker).progress
        assert progress.weights_progress_first_at == T0 + timedelta(seconds=30)
        assert progress.weights_progress_first_loaded == 0


class TestPastedLog:
    """A pasted log's bar lines carry no time: tqdm's own clock dates them."""

    def test_bar_readings_are_dated_by_elapsed(self) -> None:
        """Bar lines after a 10:00:05 header: read at 10:00:05 + elapsed, not all at 10:00:05."""
        tracker = UnitTracker("vllm", reference_year=2026)
        header = "INFO 06-07 10:00:05 [gpu_model_runner.py:1] Starting to load model m..."
        lines = [
            header,
            "Loading safetensors checkpoint shards:   0% Completed | 0/10 [00:00<?, ?it/s]",
            "Loading safetensors checkpoint shards:  20% Completed | 2/10 [00:40<02:40, 20.00s/it]",
            "Loading safetensors checkpoint shards:  40% Completed | 4/10 [01:20<02:00, 20.00s/it]",
        ]
        for line in lines:
            tracker.feed(Record(line, unit="vllm"))
        current = _current(tracker)
        loading = datetime(2026, 6, 7, 10, 0, 5, tzinfo=UTC)
        assert current.last_record_at == loading  # the line clock knows no better
        progress = current.progress
        assert progress.bar is not None and progress.bar.at == loading + timedelta(seconds=80)
        assert progress.weights_progress_first_at == loading
        assert progress.weights_progress_at == loading + timedelta(seconds=80)
        assert log_remaining_seconds(current, loading + timedelta(seconds=90)) == 110.0


class TestGraphBar:
    """The CUDA graph capture bar: counts and remaining time."""

    def test_capture_bar(self) -> None:
        """'Capturing CUDA graphs (decode, FULL):  29%|…| 10/35 [00:01<00:02, 10.66it/s]'."""
        journal = Journal()
        tracker = UnitTracker("u")
        tracker.feed(journal.at(10).line(LOAD, A))
        tracker.feed(
            journal.at(50).line(
                TP0 + "\rCapturing CUDA graphs (decode, FULL):  29%|██▊       | 10/35 "
                "[00:01<00:02, 10.66it/s]",
                A,
            )
        )
        current = _current(tracker)
        assert current.phase is Phase.CAPTURING_CUDA_GRAPHS
        bar = current.progress.bar
        assert bar is not None
        assert (bar.phase, bar.done, bar.total, bar.remaining_seconds) == (
            Phase.CAPTURING_CUDA_GRAPHS,
            10,
            35,
            2.0,
        )


class TestStartSeen:
    """Only incarnations whose start was read have whole durations."""

    def test_systemd_started_or_banner_or_neither(self) -> None:
        """systemd's Started, vLLM's banner, or a log read from its middle."""
        journal = Journal()
        by_systemd = UnitTracker("u")
        by_systemd.feed(journal.at(0).systemd("Started u.", A))
        assert _current(by_systemd).start_seen
        banner = UnitTracker("vllm")
        banner.feed(Record("INFO 11-28 23:35:00 [api_server.py:1] vLLM API server version 0.8.5"))
        assert _current(banner).start_seen
        middle = UnitTracker("vllm")
        middle.feed(Record(LOAD.removeprefix(TP0)))
        assert not _current(middle).start_seen
