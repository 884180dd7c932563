"""The cursor store on a real directory: file names, unreadable files, saved counters, failures."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.counters import CarriedCrash, UnitCounters
from vllm_sentinel.state.cursor_store import CursorStore, HostState, decode_host, encode_host

HOST_NAMES = st.text(
    st.sampled_from("ABCxyz0189_.:-"), min_size=1, max_size=64
)  # the config's host-name alphabet
T = datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)


class TestHostFileNames:
    """A host name becomes a file name only through a reversible encoding."""

    @pytest.mark.parametrize(
        ("host", "name"),
        [
            ("llm-two", "llm-two.cursor"),
            ("gpu-node.example", "gpu-node.example.cursor"),
            ("..", "%2E..cursor"),
            (".", "%2E.cursor"),
            (".hidden", "%2Ehidden.cursor"),
            ("a:b", "a%3Ab.cursor"),
        ],
    )
    def test_names(self, tmp_path: Path, host: str, name: str) -> None:
        """Plain names stay as they are; a leading dot and ':' are encoded (issue 15 §8: a
        host named ``..`` wrote ``...cursor``)."""
        store = CursorStore(tmp_path)
        store.mark(host, "s=1;i=1")
        assert store.flush_sync() == 1
        assert sorted(path.name for path in tmp_path.iterdir()) == [name]
        assert CursorStore(tmp_path).load(host) == "s=1;i=1"

    @given(HOST_NAMES)
    def test_encoding_is_reversible_and_safe(self, host: str) -> None:
        """Every name of the config's alphabet: no '/', never a leading '.', decodes back."""
        encoded = encode_host(host)
        assert "/" not in encoded and not encoded.startswith(".")
        assert decode_host(encoded) == host

    def test_a_file_of_an_earlier_version_is_renamed_and_kept(self, tmp_path: Path) -> None:
        """``a:b.cursor`` (the name as it was) becomes ``a%3Ab.cursor``: an upgrade keeps its
        cursor; a file named from an unsafe host name (``...cursor``) is left alone."""
        (tmp_path / "a:b.cursor").write_text("s=9;i=9\n")
        (tmp_path / "...cursor").write_text("s=8;i=8\n")
        store = CursorStore(tmp_path)
        with capture_logs() as logs:
            assert store.load("a:b") == "s=9;i=9"
            assert store.load("..") is None
        assert sorted(path.name for path in tmp_path.iterdir()) == ["...cursor", "a%3Ab.cursor"]
        assert [e["event"] for e in logs] == ["cursor_file_renamed"]


class TestUnreadableFiles:
    """A cursor file that cannot be used is said once, and the host starts without it."""

    @pytest.mark.parametrize(
        ("content", "error"),
        [(b"", "no cursor in the file"), (b"\xff\xfe\x00binary", "not UTF-8 text")],
        ids=["empty", "binary"],
    )
    def test_logged_once(self, tmp_path: Path, content: bytes, error: str) -> None:
        """Empty and binary files: one ``cursor_unreadable`` each, however often they are read
        (issue 15 §8: an empty file logged nothing, a binary one twice)."""
        (tmp_path / "llm-two.cursor").write_bytes(content)
        store = CursorStore(tmp_path)
        with capture_logs() as logs:
            assert store.load("llm-two") is None
            assert store.load_state("llm-two") is None
            assert store.load("llm-two") is None
        assert [(e["event"], e["error"], e["log_level"]) for e in logs] == [
            ("cursor_unreadable", error, "warning")
        ]


class TestSavedState:
    """The cursor and the counters it belongs to, in one file."""

    def test_round_trip(self, tmp_path: Path) -> None:
        """Counters, carried crashes and the first-start time come back as they were saved."""
        counters = UnitCounters(
            starts=5,
            crashes={CrashCause.CUDA_OOM: 3, CrashCause.UNKNOWN: 1},
            records={"info": 40, "error": 12, "none": 1},
            benign_errors=2,
            carried=(CarriedCrash("a" * 32, T, T, CrashCause.PENDING, Phase.LOADING_WEIGHTS),),
        )
        store = CursorStore(tmp_path)
        store.mark("h", HostState("s=1;i=2", T, {"vllm.service": counters}))
        store.flush_sync()
        loaded = CursorStore(tmp_path).load_state("h")
        assert loaded == HostState("s=1;i=2", T, {"vllm.service": counters})
        assert store.saved("h") == loaded

    def test_a_damaged_state_keeps_what_is_valid(self, tmp_path: Path) -> None:
        """Unknown causes and levels, negative or non-integer counts are dropped, not raised."""
        (tmp_path / "h.cursor").write_text(
            's=1;i=2\nstate={"since":null,"units":{"u":{"starts":-3,"crashes":{"cuda_oom":2,'
            '"bogus":5},"records":{"info":"7","error":4,"loud":1},"benign":1.5,'
            '"carried":[{"key":""},{"key":"k","cause":"nope","phase":"x"}]}}}\n'
        )
        state = CursorStore(tmp_path).load_state("h")
        assert state is not None and state.cursor == "s=1;i=2"
        unit = state.units["u"]
        assert (unit.starts, dict(unit.crashes), dict(unit.records), unit.benign_errors) == (
            0,
            {CrashCause.CUDA_OOM: 2},
            {"error": 4},
            0,
        )
        assert unit.carried == (CarriedCrash("k", None, None, CrashCause.UNKNOWN, Phase.CRASHED),)

    def test_a_cursor_only_file_of_an_earlier_version_is_read(self, tmp_path: Path) -> None:
        """The cursor alone (and a legacy ``unsettled_since=`` line): read, no counters."""
        (tmp_path / "h.cursor").write_text("s=1;i=2\nunsettled_since=1796000000000000\n")
        state = CursorStore(tmp_path).load_state("h")
        assert state == HostState("s=1;i=2", legacy=True)


class TestFailures:
    """A state directory that stops working: counted, logged sparingly, retried."""

    def test_failures_are_counted_and_logged_once_a_minute(self, tmp_path: Path) -> None:
        """Writes into a path that is a file fail: each is counted; one log line per minute
        with the number of failures; the recovery is logged once; nothing pending is lost."""
        now = [0.0]
        blocked = tmp_path / "state"
        blocked.write_text("a file in the way")
        store = CursorStore(blocked, clock=lambda: now[0])
        with capture_logs() as logs:
            for n in range(5):
                store.mark("h", f"s=1;i={n}")
                assert store.flush_sync() == 0
                now[0] += 1
            now[0] += 60
            store.mark("h", "s=1;i=9")
            assert store.flush_sync() == 0
            blocked.unlink()
            assert store.flush_sync() == 1
            assert store.flush_sync() == 0
        assert store.failures_total == 6
        assert [(e["event"], e.get("failures")) for e in logs] == [
            ("cursor_save_failed", 1),
            ("cursor_save_failed", 5),
            ("cursor_saved", None),
        ]
        assert CursorStore(blocked).load("h") == "s=1;i=9"
        assert store.saved_at is not None
