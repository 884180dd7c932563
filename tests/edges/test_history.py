"""HistoryStore: startup records on disk, atomic, bounded, once per start; corrupt files set aside."""

from __future__ import annotations

import asyncio
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from structlog.testing import capture_logs

from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Phase
from vllm_sentinel.engine.eta import HISTORY_SIZE
from vllm_sentinel.engine.snapshot import StartupRecord
from vllm_sentinel.state.history_store import (
    HISTORY_SKIP_REASON,
    HistoryStore,
    _StartModel,
    decode_name,
    encode_name,
)

HOST = "llm-two"
UNIT = "vllm-kimi-k25.service"
T0 = datetime(2026, 11, 28, 23, 37, 31, tzinfo=UTC)


def start(number: int, *, model: str = "/shared/kimi-k2.5-nvfp4") -> StartupRecord:
    """The ``number``-th start, an hour apart: 9 minutes of loading, ready after 690 s."""
    began = T0 + timedelta(hours=number)
    return StartupRecord(
        started_at=began,
        ready_at=began + timedelta(seconds=690),
        phase_seconds={
            Phase.STARTING: 23.5,
            Phase.LOADING_WEIGHTS: 540.25,
            Phase.CAPTURING_CUDA_GRAPHS: 120.0,
            Phase.STARTING_API_SERVER: 6.25,
        },
        invocation_id=f"{number:032x}",
        model=model,
        vllm_version="0.17.1",
        tensor_parallel_size=8,
    )


def unit_file(directory: Path, host: str = HOST, unit: str = UNIT) -> Path:
    return directory / encode_name(host) / f"{encode_name(unit)}.json"


class TestRoundTrip:
    """What one run writes, the next run reads."""

    def test_records_survive_a_new_store(self, tmp_path: Path) -> None:
        """Every field, times in UTC with their microseconds, phases by name."""
        store = HistoryStore(tmp_path)
        first, second = start(1), start(2, model="other")
        assert store.add(HOST, UNIT, second)
        assert store.add(HOST, UNIT, first)
        assert store.flush_sync() == 1
        again = HistoryStore(tmp_path)
        assert again.load() == 1
        assert again.records(HOST, UNIT) == (first, second)  # in ready order
        document = orjson.loads(unit_file(tmp_path).read_bytes())
        assert document["format"] == 1
        assert (document["host"], document["unit"]) == (HOST, UNIT)
        assert document["starts"][0]["started_at"] == "2026-11-29T00:37:31Z"
        assert document["starts"][0]["phase_seconds"]["loading_weights"] == 540.25

    def test_the_same_start_is_kept_once(self, tmp_path: Path) -> None:
        """A start seen again (the backfill after a restart) is not added twice."""
        store = HistoryStore(tmp_path)
        assert store.add(HOST, UNIT, start(1))
        assert not store.add(HOST, UNIT, start(1))
        store.flush_sync()
        again = HistoryStore(tmp_path)
        again.load()
        assert not again.add(HOST, UNIT, start(1))
        assert again.flush_sync() == 0  # nothing changed, nothing written

    def test_bounded_to_the_newest(self, tmp_path: Path) -> None:
        """Only the newest HISTORY_SIZE starts per unit are kept, in memory and on disk."""
        store = HistoryStore(tmp_path)
        for number in range(HISTORY_SIZE + 3):
            store.add(HOST, UNIT, start(number))
        store.flush_sync()
        again = HistoryStore(tmp_path)
        again.load()
        kept = again.records(HOST, UNIT)
        assert len(kept) == HISTORY_SIZE
        assert kept[0] == start(3) and kept[-1] == start(HISTORY_SIZE + 2)

    def test_units_and_hosts_apart(self, tmp_path: Path) -> None:
        """One file per (host, unit); names that are not plain file names are encoded."""
        store = HistoryStore(tmp_path)
        odd_host, odd_unit = "..", "vllm@a\\x2db:c.service"
        store.add(HOST, UNIT, start(1))
        store.add(odd_host, odd_unit, start(2))
        assert store.flush_sync() == 2
        assert unit_file(tmp_path, odd_host, odd_unit).parent.parent == tmp_path
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")) == [
            "%2E./vllm%40a%5Cx2db%3Ac.service.json",
            "llm-two/vllm-kimi-k25.service.json",
        ]
        again = HistoryStore(tmp_path)
        assert again.load() == 2
        assert again.records(odd_host, odd_unit) == (start(2),)
        assert again.records(HOST, "vllm-other.service") == ()

    def test_in_memory_store_writes_nothing(self, tmp_path: Path) -> None:
        """Without a directory (demo, tests) the history lives in memory only."""
        store = HistoryStore(None)
        assert store.add(HOST, UNIT, start(1))
        assert store.flush_sync() == 0 and store.load() == 0
        assert store.records(HOST, UNIT) == (start(1),)

    def test_async_flush_writes_atomically(self, tmp_path: Path) -> None:
        """flush() writes in a thread and leaves no temporary file behind."""
        store = HistoryStore(tmp_path)
        store.add(HOST, UNIT, start(1))
        assert asyncio.run(store.flush()) == 1
        assert asyncio.run(store.flush()) == 0
        assert [p.name for p in unit_file(tmp_path).parent.iterdir()] == [f"{UNIT}.json"]


class TestCorruptFiles:
    """A file that cannot be read is reported once, counted, set aside and ignored."""

    @pytest.mark.parametrize(
        "content",
        [
            b"{not json",
            b'{"format": 2, "host": "llm-two", "unit": "u", "starts": []}',
            b'{"format": 1, "host": "llm-two", "unit": "u", "starts": [{"started_at": '
            b'"2026-11-28T23:37:31", "ready_at": "2026-11-28T23:49:01Z"}]}',
            b'{"format": 1, "host": "llm-two", "unit": "u", "starts": [{"started_at": '
            b'"2026-11-28T23:37:31Z", "ready_at": "2026-11-28T23:49:01Z", '
            b'"phase_seconds": {"warming_up": 3}}]}',
            b'{"format": 1, "host": "llm-two", "unit": "u", "starts": [{"started_at": '
            b'"2026-11-28T23:37:31Z", "ready_at": "2026-11-28T23:49:01Z", '
            b'"phase_seconds": {"compiling": -3}}]}',
            b"\xff\xfe",
        ],
        ids=["not-json", "unknown-format", "naive-time", "unknown-phase", "negative", "not-utf8"],
    )
    def test_reported_once_counted_and_set_aside(self, tmp_path: Path, content: bytes) -> None:
        """Logged with the file and error, counted for its host, renamed *.corrupt, skipped."""
        path = unit_file(tmp_path)
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
        store = HistoryStore(tmp_path)
        with capture_logs() as logs:
            assert store.load() == 0
        (event,) = [entry for entry in logs if entry["event"] == "history_file_corrupt"]
        assert event["path"] == str(path) and event["host"] == HOST and event["error"]
        assert store.skipped(HOST) == {HISTORY_SKIP_REASON: 1}
        assert store.records(HOST, UNIT) == ()
        assert not path.exists()
        assert path.with_name(path.name + ".corrupt").read_bytes() == content
        # the unit starts afresh; the next run neither reads nor reports the old file
        store.add(HOST, UNIT, start(1))
        store.flush_sync()
        again = HistoryStore(tmp_path)
        with capture_logs() as later:
            assert again.load() == 1
        assert [entry for entry in later if entry["event"] == "history_file_corrupt"] == []
        assert again.records(HOST, UNIT) == (start(1),)

    def test_a_failed_write_stays_pending(self, tmp_path: Path) -> None:
        """A write that fails is logged and retried by the next flush."""
        blocker = tmp_path / "history"
        blocker.write_text("a file where the directory should be")
        store = HistoryStore(blocker)
        store.add(HOST, UNIT, start(1))
        with capture_logs() as logs:
            assert store.flush_sync() == 0
        assert [entry["event"] for entry in logs] == ["history_save_failed"]
        blocker.unlink()
        assert store.flush_sync() == 1
        again = HistoryStore(blocker)
        again.load()
        assert again.records(HOST, UNIT) == (start(1),)


def test_names_round_trip() -> None:
    """encode_name is reversible and never yields a path, a hidden file or '..'."""
    for name in ("llm-two", "..", ".hidden", "a/b", "vllm@x\\x2d1.service", "GPU:0"):
        encoded = encode_name(name)
        assert decode_name(encoded) == name
        assert "/" not in encoded and not encoded.startswith(".")


def test_file_phases_are_the_startup_phases() -> None:
    """The file format names exactly the startup phases."""
    (phases,) = {
        typing.get_args(field.annotation)[0]
        for name, field in _StartModel.model_fields.items()
        if name == "phase_seconds"
    }
    assert set(typing.get_args(phases)) == {phase.value for phase in STARTUP_PHASES}


def test_save_failures_are_logged_at_most_once_a_minute(tmp_path: Path) -> None:
    """A disk that keeps failing: 40 units × 5 flushes in a minute are one ``history_save_failed``
    with the count, like ``cursor_save_failed``; the next minute one more (issue 22 §6)."""
    blocker = tmp_path / "history"
    blocker.write_text("a file where the directory should be")
    now = [0.0]
    store = HistoryStore(blocker, clock=lambda: now[0])
    with capture_logs() as logs:
        for flush in range(5):
            for unit in range(40):
                store.add(HOST, f"vllm-{unit}.service", start(flush + 1))
            assert store.flush_sync() == 0
            now[0] += 10.0
        now[0] += 60.0
        store.flush_sync()
    failed = [entry for entry in logs if entry["event"] == "history_save_failed"]
    assert [entry["failures"] for entry in failed] == [1, 40 * 5]  # the first; then 199 + 1
    assert store.failures_total == 40 * 6
