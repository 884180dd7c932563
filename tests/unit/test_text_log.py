"""TextLogDecoder: wrappers, chunking, bad bytes, long lines."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vllm_sentinel.engine.decode.text_log import TextLogDecoder


def _decode(data: bytes, **options: object) -> list:
    decoder = TextLogDecoder(reference_year=2026, **options)  # type: ignore[arg-type]
    return decoder.feed(data) + decoder.flush()


@pytest.mark.parametrize(
    ("line", "message", "realtime", "pid"),
    [
        (
            "Jan 28 10:40:08 localhost systemd[1]: vllm3.service: Main process exited, code=exited, status=1/FAILURE",
            "vllm3.service: Main process exited, code=exited, status=1/FAILURE",
            datetime(2026, 1, 28, 10, 40, 8, tzinfo=UTC),
            1,
        ),
        (
            "авг 18 14:15:04 host1 python3[28059]: (EngineCore pid=28059) INFO 08-18 14:15:04 [vllm.py:1295] x",
            "(EngineCore pid=28059) INFO 08-18 14:15:04 [vllm.py:1295] x",
            datetime(2026, 8, 18, 14, 15, 4, tzinfo=UTC),
            28059,
        ),
        (
            "vllm-eb_1  | INFO:     Started server process [1]",
            "INFO:     Started server process [1]",
            None,
            None,
        ),
        (
            "vllm-1  | 2026-03-01T10:00:00.123456789Z (APIServer pid=1) INFO 06-07 08:54:54 [a.py:1] x",
            "(APIServer pid=1) INFO 06-07 08:54:54 [a.py:1] x",
            datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC),
            None,
        ),
        (
            "vllm-1  | 2026-03-01T10:00:00+01:00 INFO 06-07 08:54:54 [a.py:1] x",
            "INFO 06-07 08:54:54 [a.py:1] x",
            datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC),
            None,
        ),
        (
            "vllm-1  | 2026 was a good year",
            "2026 was a good year",
            None,
            None,
        ),
        (
            "2024-06-28T06:11:52.685300953Z (LLMRayActor pid=20770) INFO 06-28 06:11:45 a.py:1] y",
            "(LLMRayActor pid=20770) INFO 06-28 06:11:45 a.py:1] y",
            datetime(2024, 6, 28, 6, 11, 52, 685300, tzinfo=UTC),
            None,
        ),
        (
            "2025-04-29 22:14:28.456 | ValueError: Invalid repository ID",
            "ValueError: Invalid repository ID",
            datetime(2025, 4, 29, 22, 14, 28, 456000, tzinfo=UTC),
            None,
        ),
        (
            "2024-09-13T22:25:38,258 [INFO ] W-9000-model_1.0-stdout MODEL_LOG - INFO 09-13 22:25:38 model_runner.py:1008] z",
            "INFO 09-13 22:25:38 model_runner.py:1008] z",
            datetime(2024, 9, 13, 22, 25, 38, tzinfo=UTC),
            None,
        ),
        (
            "Capturing CUDA graphs: 100%|██████████| 67/67 [00:14<00:00,  4.71it/s]",
            "Capturing CUDA graphs: 100%|██████████| 67/67 [00:14<00:00,  4.71it/s]",
            None,
            None,
        ),
    ],
)
def test_wrapper_is_stripped(
    line: str, message: str, realtime: datetime | None, pid: int | None
) -> None:
    """journald short (any month language), compose (also with ``docker compose logs -t``'s
    RFC 3339 stamp after it), RFC 3339, Docker UI and TorchServe wrappers."""
    (record,) = _decode(line.encode() + b"\n")
    assert (record.message, record.realtime, record.pid) == (message, realtime, pid)


class TestRobustness:
    """Bad input is repaired or counted, never raised."""

    def test_chunk_boundaries_do_not_matter(self) -> None:
        """The same bytes split anywhere give the same records."""
        data = "".join(f"INFO 01-01 00:00:0{i} [a.py:1] line {i}\n" for i in range(5)).encode()
        whole = _decode(data)
        decoder = TextLogDecoder(reference_year=2026)
        pieces = [decoder.feed(data[i : i + 7]) for i in range(0, len(data), 7)]
        assert [r for p in pieces for r in p] + decoder.flush() == whole

    def test_invalid_utf8_and_ansi(self) -> None:
        """Invalid bytes become U+FFFD and are counted; colour is removed."""
        decoder = TextLogDecoder()
        (record,) = decoder.feed(b"\x1b[32mINFO\x1b[0m bad \xff byte\n") + decoder.flush()
        assert record.message == "INFO bad \ufffd byte"
        assert decoder.repaired["invalid_utf8"] == 1

    def test_long_line_is_cut_and_counted(self) -> None:
        """A line over max_line_bytes is truncated, counted once, and the next line is intact."""
        decoder = TextLogDecoder(max_line_bytes=100)
        records = decoder.feed(b"x" * 1000) + decoder.feed(b"y" * 1000 + b"\nnext\n")
        records += decoder.flush()
        assert [len(r.message) for r in records] == [100, 4]
        assert decoder.skipped["line_truncated"] == 1
