"""JournalJsonDecoder: journald's JSON renderings and broken input."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import orjson

from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder, decode_field


def _line(**fields: object) -> bytes:
    return orjson.dumps(fields) + b"\n"


class TestFields:
    """How journalctl -o json renders values."""

    def test_byte_array_message(self) -> None:
        """Control characters (ANSI, \\r) make journald send an array of bytes."""
        message = "\x1b[1;36m(Worker_TP7 pid=9)\x1b[0;0m ERROR boom\r"
        assert decode_field(list(message.encode())) == message

    def test_repeated_field_takes_the_last(self) -> None:
        """A field repeated in one entry is an array of strings."""
        assert decode_field(["a", "b"]) == "b"

    def test_service_line(self) -> None:
        """The service's own lines carry _SYSTEMD_UNIT and _SYSTEMD_INVOCATION_ID."""
        decoder = JournalJsonDecoder("llm-two")
        (record,) = decoder.feed(
            _line(
                MESSAGE="hello",
                __REALTIME_TIMESTAMP="1764372981000000",
                _SYSTEMD_UNIT="vllm.service",
                _SYSTEMD_INVOCATION_ID="a" * 32,
                _PID="4242",
                PRIORITY="6",
                __CURSOR="s=1;i=2",
            )
        )
        assert record.message == "hello" and record.unit == "vllm.service"
        assert record.invocation_id == "a" * 32 and record.pid == 4242 and not record.from_manager
        assert record.realtime == datetime(2025, 11, 28, 23, 36, 21, tzinfo=UTC)
        assert record.host == "llm-two" and decoder.last_cursor == "s=1;i=2"

    def test_manager_line(self) -> None:
        """systemd's messages about a unit carry UNIT= and INVOCATION_ID=."""
        decoder = JournalJsonDecoder()
        (record,) = decoder.feed(
            _line(
                MESSAGE="Started vllm.service.",
                _PID="1",
                SYSLOG_IDENTIFIER="systemd",
                _SYSTEMD_UNIT="init.scope",
                UNIT="vllm.service",
                INVOCATION_ID="b" * 32,
                MESSAGE_ID="39f53479d3a045ac8e11786248231fbf",
                __REALTIME_TIMESTAMP="1",
            )
        )
        assert record.from_manager and record.unit == "vllm.service"
        assert record.invocation_id == "b" * 32
        assert record.message_id == "39f53479d3a045ac8e11786248231fbf"


class TestJournaldEntries:
    """journald's own entries about a unit (``_TRANSPORT=driver``)."""

    # the fields of a real one (systemd 252, the real-journald tier's vllm-burst.service)
    SUPPRESSED: ClassVar[dict[str, str]] = {
        "MESSAGE": "Suppressed 2827 messages from vllm-burst.service",
        "MESSAGE_ID": "a596d6fe7bfa4994828e72309e95d61e",
        "N_DROPPED": "2827",
        "OBJECT_SYSTEMD_UNIT": "vllm-burst.service",
        "OBJECT_PID": "266",
        "_SYSTEMD_UNIT": "systemd-journald.service",
        "_SYSTEMD_INVOCATION_ID": "5269808adb1b4fef8152b8f7890d28d6",
        "_TRANSPORT": "driver",
        "_PID": "47",
        "_COMM": "systemd-journal",
        "SYSLOG_IDENTIFIER": "systemd-journald",
        "PRIORITY": "6",
        "__REALTIME_TIMESTAMP": "1796166263273697",
        "__CURSOR": "s=1;i=436",
    }

    def test_suppressed_messages_are_the_units_with_the_count(self) -> None:
        """``Suppressed N messages from UNIT``: a record of UNIT (not of journald) that
        carries N (``N_DROPPED``) and no invocation id."""
        (record,) = JournalJsonDecoder("h").feed(_line(**self.SUPPRESSED))
        assert record.unit == "vllm-burst.service"
        assert record.dropped == 2827
        assert record.invocation_id is None and not record.from_manager

    def test_only_journald_can_say_it(self) -> None:
        """The same fields from a unit's own process (stdout or the native protocol) are
        that process's line: no count."""
        for transport in ("stdout", "journal", "syslog"):
            forged = {**self.SUPPRESSED, "_TRANSPORT": transport, "_SYSTEMD_UNIT": "evil.service"}
            (record,) = JournalJsonDecoder("h").feed(_line(**forged))
            assert record.unit == "evil.service" and record.dropped is None

    def test_the_stream_id_is_kept(self) -> None:
        """``_STREAM_ID``: which start's stdout stream the line came on."""
        (record,) = JournalJsonDecoder("h").feed(
            _line(MESSAGE="x", _SYSTEMD_UNIT="vllm.service", _STREAM_ID="4f7cf074" * 4)
        )
        assert record.stream == "4f7cf074" * 4
        (plain,) = JournalJsonDecoder("h").feed(_line(MESSAGE="x", _SYSTEMD_UNIT="vllm.service"))
        assert plain.stream is None and plain.dropped is None


class TestBrokenInput:
    """Every unreadable line is counted by reason; nothing raises."""

    def test_reasons(self) -> None:
        """Broken JSON, non-objects, missing and null messages, wrong types."""
        decoder = JournalJsonDecoder()
        data = b"".join(
            [
                b"{not json\n",
                b"[1,2,3]\n",
                _line(FOO="x"),
                _line(MESSAGE=None),
                _line(MESSAGE={"a": 1}),
                _line(MESSAGE="ok", _PID=[1, 2, "x"]),
                b"-- cursor: s=1\n",
            ]
        )
        records = decoder.feed(data)
        assert [r.message for r in records] == ["", "ok"]
        assert dict(decoder.skipped) == {
            "invalid_json": 1,
            "not_an_object": 1,
            "no_message": 1,
            "message_null": 1,
            "invalid_field": 2,
        }

    def test_oversized_line_is_dropped_and_counted(self) -> None:
        """A line over max_line_bytes is dropped; the next one decodes."""
        decoder = JournalJsonDecoder(max_line_bytes=50)
        big = _line(MESSAGE="x" * 200)
        records = decoder.feed(big[:30]) + decoder.feed(big[30:] + _line(MESSAGE="y"))
        assert [r.message for r in records] == ["y"]
        assert decoder.skipped["line_too_long"] == 1


def test_every_field_the_decoder_reads_is_asked_of_journalctl() -> None:
    """The daemon runs ``journalctl --output-fields=JOURNAL_FIELDS``: a field the decoder reads
    but does not ask for is always absent there (``_HOSTNAME`` was: machines never parted)."""
    import re
    from pathlib import Path

    import pytest

    from vllm_sentinel.engine.decode import journal_json

    path = Path(journal_json.__file__ or "")
    if path.suffix != ".py":
        pytest.skip("compiled build: its source is checked by the pure-Python run")
    source = path.read_text()
    read = set(re.findall(r'get\("([A-Z_]+)"\)', source)) - {"__CURSOR", "__REALTIME_TIMESTAMP"}
    assert "_HOSTNAME" in read
    assert read <= set(journal_json.JOURNAL_FIELDS), sorted(read - set(journal_json.JOURNAL_FIELDS))
