"""LineBuffer: whole lines out of any chunking, a bounded partial line, overflows counted."""

from __future__ import annotations

import pytest

from vllm_sentinel.engine.decode.line_buffer import LineBuffer, NulGaps


def _lines(buffer: LineBuffer, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        completed, block = buffer.push(chunk)
        if completed is not None:
            out.append(completed)
        if block is not None:
            out.extend(line for line in block.split(b"\n") if not buffer.is_too_long(line))
    rest = buffer.flush()
    return [*out, rest] if rest is not None else out


class TestLineBuffer:
    """Splitting and bounds."""

    def test_any_chunking_gives_the_same_lines(self) -> None:
        """Lines split across chunks come out whole; the tail without newline at flush."""
        data = b"alpha\nbeta\n\ngamma\ndelta"
        for size in range(1, len(data) + 1):
            chunks = [data[i : i + size] for i in range(0, len(data), size)]
            assert _lines(LineBuffer(100, keep_truncated=False), chunks) == [
                b"alpha",
                b"beta",
                b"",
                b"gamma",
                b"delta",
            ]

    def test_long_pending_line_is_cut_or_dropped(self) -> None:
        """Over the limit, a partial line is cut (text) or dropped (JSON); counted once."""
        for keep, expected in ((True, [b"xxxx", b"ok"]), (False, [b"ok"])):
            buffer = LineBuffer(4, keep_truncated=keep)
            assert _lines(buffer, [b"xx", b"xxxxxxx", b"xx\nok\n"]) == expected
            assert buffer.overflows == 1
            assert buffer.pending_bytes == 0

    def test_pending_never_exceeds_the_limit(self) -> None:
        """Megabytes without a newline hold at most max_line_bytes."""
        buffer = LineBuffer(1024, keep_truncated=True)
        for _ in range(100):
            buffer.push(b"y" * 65536)
            assert buffer.pending_bytes <= 1024


class TestNulGaps:
    """A run of 8+ NUL bytes (a truncated file's gap) is one line break, counted exactly."""

    DATA = b"INFO one\n" + b"\x00" * 100 + b"INFO two\nx\x00y\x00\x00z\n" + b"\x00" * 9

    @pytest.mark.parametrize("size", [1, 3, 7, 8, 50, 1000])
    def test_any_chunking_gives_the_same_text_and_counts(self, size: int) -> None:
        """Chunks of any size: a run split across chunks is one run; short NUL runs stay."""
        gaps = NulGaps()
        chunks = [self.DATA[i : i + size] for i in range(0, len(self.DATA), size)]
        text = b"".join(gaps.close(chunks))
        assert text == b"INFO one\n\nINFO two\nx\x00y\x00\x00z\n\n"
        assert (gaps.runs, gaps.bytes_total) == (2, 109)

    def test_short_trailing_nuls_are_kept(self) -> None:
        gaps = NulGaps()
        assert b"".join(gaps.close([b"a\x00\x00", b"\x00"])) == b"a\x00\x00\x00"
        assert gaps.runs == 0
