"""JournalJsonDecoder: journald's JSON renderings and broken input."""

from __future__ import annotations

from datetime import UTC, datetime

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
