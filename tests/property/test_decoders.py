"""The decoders against hostile and broken bytes: nothing raises, buffers stay bounded, every
skip is counted, and the records do not depend on how the bytes were chunked."""

from __future__ import annotations

import time
import tracemalloc
from datetime import datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.hostile import (
    CORPUS,
    JOURNAL_FIELDS,
    PROPERTY,
    chunk,
    hostile_text,
    journal_entries,
)
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.decode.text_log import TextLogDecoder
from vllm_sentinel.engine.tracker import UnitTracker

MIB = 1 << 20
DROP_REASONS = ("invalid_json", "not_an_object", "no_message", "line_too_long", "invalid_field")

cuts = st.lists(st.integers(0, 1 << 16), max_size=12)
journal_lines = st.lists(
    journal_entries.map(orjson.dumps)
    | st.binary(max_size=120)
    | st.sampled_from([b"{", b"[]", b"null", b'"MESSAGE"', b"-- cursor: s=1;i=2", b"{}", b" "]),
    max_size=20,
)


def _feed_all(decoder: JournalJsonDecoder | TextLogDecoder, chunks: list[bytes]) -> list[Record]:
    records: list[Record] = []
    for piece in chunks:
        records += decoder.feed(piece)
        assert decoder.pending_bytes <= decoder.max_line_bytes
    return records + decoder.flush()


def _check_record_types(record: Record) -> None:
    assert isinstance(record.message, str)
    assert record.realtime is None or isinstance(record.realtime, datetime)
    assert record.realtime is None or record.realtime.tzinfo is not None
    for text in (
        record.unit,
        record.invocation_id,
        record.syslog_identifier,
        record.cursor,
        record.message_id,
        record.host,
    ):
        assert text is None or isinstance(text, str)
    for number in (record.pid, record.priority):
        assert number is None or (isinstance(number, int) and not isinstance(number, bool))
    assert isinstance(record.from_manager, bool)


class TestJournalJsonDecoder:
    """``journalctl -o json`` bytes, from broken to malicious."""

    @PROPERTY
    @given(data=st.binary(max_size=2048), cuts=cuts, limit=st.integers(1, 300))
    def test_random_bytes_never_raise_and_pending_stays_under_the_line_limit(
        self, data: bytes, cuts: list[int], limit: int
    ) -> None:
        """Any bytes in any chunks: no exception, the pending buffer never exceeds the limit."""
        decoder = JournalJsonDecoder("h", max_line_bytes=limit)
        for record in _feed_all(decoder, chunk(data, cuts)):
            _check_record_types(record)
        assert set(decoder.skipped) <= {*DROP_REASONS, "message_null"}

    @PROPERTY
    @given(lines=journal_lines, cuts=cuts)
    def test_any_field_of_any_type_never_raises_and_every_drop_is_counted(
        self, lines: list[bytes], cuts: list[int]
    ) -> None:
        """Numbers, lists, nulls, dicts, bytes in any field: each line is a record or a count."""
        data = b"\n".join(lines) + b"\n"
        decoder = JournalJsonDecoder("h")
        records = _feed_all(decoder, chunk(data, cuts))
        for record in records:
            _check_record_types(record)
        meaningful = sum(1 for line in lines if line.strip())
        trailers = sum(1 for line in lines if line.startswith(b"-- cursor: "))
        dropped = meaningful - trailers - len(records)
        assert 0 <= dropped <= sum(decoder.skipped[reason] for reason in DROP_REASONS)

    @PROPERTY
    @given(lines=journal_lines, cuts=cuts, limit=st.integers(16, 400))
    def test_records_do_not_depend_on_chunking(
        self, lines: list[bytes], cuts: list[int], limit: int
    ) -> None:
        """The same bytes cut anywhere give the same records and the same skip counts."""
        data = b"\n".join(lines)
        whole = JournalJsonDecoder("h", max_line_bytes=limit)
        pieces = JournalJsonDecoder("h", max_line_bytes=limit)
        assert _feed_all(pieces, chunk(data, cuts)) == _feed_all(whole, [data])
        assert pieces.skipped == whole.skipped

    @pytest.mark.parametrize("field", JOURNAL_FIELDS)
    def test_a_one_mebibyte_value_in_any_field(self, field: str) -> None:
        """A 1 MiB string or byte array in any field is decoded or ignored, never raised."""
        decoder = JournalJsonDecoder("h")
        for value in ("x" * MIB, [0x41] * MIB, ["y" * MIB]):
            entry = {"MESSAGE": "hello", "_SYSTEMD_UNIT": "vllm.service", field: value}
            records = decoder.feed(orjson.dumps(entry) + b"\n")
            assert len(records) == 1
            assert len(records[0].message) <= MIB

    @pytest.mark.parametrize(
        "field",
        # MESSAGE drops the record; _COMM, _TRANSPORT and USER_INVOCATION_ID are only compared
        # or read for systemd's own lines, so a service line never reads them
        [
            f
            for f in JOURNAL_FIELDS
            if f not in ("MESSAGE", "_COMM", "_TRANSPORT", "USER_INVOCATION_ID")
        ],
    )
    @pytest.mark.parametrize("value", [{"a": "b"}, True, [1, "x"], [[300]]], ids=repr)
    def test_a_field_of_no_usable_shape_is_ignored_and_counted(
        self, field: str, value: object
    ) -> None:
        """A dict, a bool or a mixed list where a string belongs: record kept, field counted."""
        decoder = JournalJsonDecoder("h")
        (record,) = decoder.feed(orjson.dumps({"MESSAGE": "m", field: value}) + b"\n")
        assert record.message == "m"
        assert decoder.skipped == {"invalid_field": 1}

    def test_a_message_over_the_cap_is_cut(self) -> None:
        """A 3 MiB message fits the line limit but is cut to 1 MiB on the record."""
        decoder = JournalJsonDecoder("h")
        (record,) = decoder.feed(orjson.dumps({"MESSAGE": "z" * (3 * MIB)}) + b"\n")
        assert len(record.message) == MIB

    def test_millions_of_bytes_without_a_newline_are_dropped_and_counted(self) -> None:
        """16 MiB with no newline never buffers more than the line limit; the next line reads."""
        decoder = JournalJsonDecoder("h", max_line_bytes=MIB)
        piece = b'{"MESSAGE":"' + b"a" * (64 * 1024)
        for _ in range(256):
            assert decoder.feed(piece) == []
            assert decoder.pending_bytes <= MIB
        (record,) = decoder.feed(b"\n" + orjson.dumps({"MESSAGE": "after"}) + b"\n")
        assert record.message == "after"
        assert decoder.skipped["line_too_long"] == 1

    def test_nul_bytes_and_invalid_utf8_in_byte_arrays(self) -> None:
        """journald's byte arrays may hold NUL and invalid UTF-8: replaced, not raised."""
        decoder = JournalJsonDecoder("h")
        message = [0, 0xFF, 0xFE, 0xC3, 0x28, 0x1B, 0x5B, 0x0D, 0x41, 0xED, 0xA0, 0x80]
        (record,) = decoder.feed(orjson.dumps({"MESSAGE": message, "UNIT": [0xFF]}) + b"\n")
        assert record.message.startswith("\x00\ufffd")
        assert record.message.encode("utf-8")  # valid UTF-8 again: no surrogates slipped in

    @pytest.mark.parametrize(
        ("realtime", "valid"),
        [
            ("253402300799999999", True),  # 9999-12-31T23:59:59.999999
            ("253402300800000000", False),  # year 10000
            ("9223372036854775807", False),
            ("-62135596800000000", True),  # 0001-01-01
            ("-62135596800000001", False),
            ("1e30", False),
            ("", False),
            ("١٢٣", True),  # Arabic-Indic digits: int() reads them; harmless
        ],
    )
    def test_timestamps_at_and_beyond_the_datetime_range(self, realtime: str, valid: bool) -> None:
        """A realtime out of datetime's range is counted as invalid_field, the record kept."""
        decoder = JournalJsonDecoder("h")
        (record,) = decoder.feed(
            orjson.dumps({"MESSAGE": "m", "__REALTIME_TIMESTAMP": realtime}) + b"\n"
        )
        assert (record.realtime is not None) is valid
        assert decoder.skipped["invalid_field"] == (0 if valid else 1)

    def test_a_large_adversarial_input_peaks_below_a_fixed_budget(self) -> None:
        """64 MiB of adversarial lines decode within a memory budget that does not grow with input."""
        decoder = JournalJsonDecoder("h", max_line_bytes=MIB)
        pieces = [
            b"x" * (3 * MIB),  # no newline for a long time, then one
            b"\n",
            orjson.dumps({"MESSAGE": [0xFF] * (MIB // 8)}) + b"\n",
            b"{" * (MIB - 1) + b"\n",
            b"[" * 10_000 + b"\n",  # deeper than orjson's recursion limit
            orjson.dumps({"MESSAGE": "m", "_PID": ["1"] * 50_000}) + b"\n",
        ]
        tracemalloc.start()
        try:
            for _ in range(8):
                for piece in pieces:
                    for start in range(0, len(piece), 1 << 16):
                        decoder.feed(piece[start : start + (1 << 16)])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 48 * MIB, f"peak {peak / MIB:.1f} MiB"
        assert decoder.skipped["line_too_long"] == 8  # the 3 MiB line, once per round
        assert decoder.skipped["invalid_json"] == 16  # the braces and the deep nesting


class TestTextLogDecoder:
    """Plain-text logs with every kind of damage."""

    @PROPERTY
    @given(data=st.binary(max_size=2048), cuts=cuts, limit=st.integers(1, 300))
    def test_random_bytes_never_raise_and_lines_are_cut_to_the_limit(
        self, data: bytes, cuts: list[int], limit: int
    ) -> None:
        """Any bytes in any chunks: no exception, pending and every message within the limit."""
        decoder = TextLogDecoder("vllm.service", max_line_bytes=limit)
        records = _feed_all(decoder, chunk(data, cuts))
        for record in records:
            _check_record_types(record)
            assert len(record.message) <= limit
            assert "\x00" not in record.message
        assert len(records) <= data.count(b"\n") + 1

    @PROPERTY
    @given(lines=st.lists(hostile_text, max_size=20), cuts=cuts, limit=st.integers(8, 400))
    def test_records_do_not_depend_on_chunking(
        self, lines: list[str], cuts: list[int], limit: int
    ) -> None:
        """The same text cut anywhere (inside UTF-8 sequences too) gives the same records."""
        data = "\n".join(lines).encode("utf-8", "surrogatepass")
        whole = TextLogDecoder("u", max_line_bytes=limit)
        pieces = TextLogDecoder("u", max_line_bytes=limit)
        assert _feed_all(pieces, chunk(data, cuts)) == _feed_all(whole, [data])
        assert (pieces.skipped, pieces.repaired) == (whole.skipped, whole.repaired)

    @PROPERTY
    @given(
        year=st.integers(1, 9999),
        offset=st.sampled_from(["Z", "+14:00", "-12:00", "+00:00", "+2359", "-23:59"]),
        body=st.sampled_from(CORPUS),
    )
    def test_wrapper_timestamps_at_the_ends_of_the_calendar(
        self, year: int, offset: str, body: str
    ) -> None:
        """RFC 3339 and journald short-iso stamps from year 1 to 9999, any offset: no raise."""
        stamp = f"{year:04d}-12-31T23:59:59.123456789{offset}"
        text = f"{stamp} {body}\n{stamp} host python3[12]: {body}\n".encode()
        decoder = TextLogDecoder("u")
        for record in _feed_all(decoder, [text]):
            _check_record_types(record)

    def test_invalid_utf8_and_nul_are_repaired_and_counted(self) -> None:
        """Invalid UTF-8 becomes U+FFFD and NUL bytes are replaced; both are counted."""
        decoder = TextLogDecoder("u")
        records = _feed_all(decoder, [b"bad \xff\xfe bytes\nnul \x00 byte\n\xed\xa0\x80\n"])
        assert [r.message for r in records] == [
            "bad \ufffd\ufffd bytes",
            "nul \ufffd byte",
            "\ufffd\ufffd\ufffd",
        ]
        assert decoder.repaired == {"invalid_utf8": 2, "nul_byte": 1}

    def test_millions_of_bytes_without_a_newline_are_cut_and_counted(self) -> None:
        """16 MiB on one line keeps at most the line limit and yields one cut record."""
        decoder = TextLogDecoder("u", max_line_bytes=MIB)
        for _ in range(256):
            assert decoder.feed(b"\x1b[31m" + b"b" * (64 * 1024)) == []
            assert decoder.pending_bytes <= MIB
        (cut,) = decoder.feed(b"\nnext line\n")[:1]
        assert len(cut.message) <= MIB
        assert decoder.skipped["line_truncated"] == 1
        assert decoder.flush() == []

    def test_carriage_return_storms_and_escape_floods_are_fast(self) -> None:
        """1 MiB of \\r, of ESC, of unterminated OSC: decoded and tracked in well under a second."""
        tracker = UnitTracker("u")
        decoder = TextLogDecoder("u", max_line_bytes=2 * MIB)
        floods = [
            b"\r" * MIB,
            b"Loading shards: " + b"\r 50% |####| 32/64" * 50_000,
            b"\x1b" * MIB,
            b"\x1b]" * (MIB // 2),
            b"\x1b[" + b"9;" * (MIB // 2) + b"m",
            b"(" * MIB,
            b"(Worker pid=1) " * 60_000,
            b"ERROR 11-29 10:00:40 [" + b"a" * MIB,
        ]
        for flood in floods:
            started = time.perf_counter()
            for record in decoder.feed(flood + b"\n"):
                tracker.feed(record)
            assert time.perf_counter() - started < 2.0, flood[:30]
        tracker.snapshot()
