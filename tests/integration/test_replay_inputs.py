"""``vllm-sentinel replay`` on inputs that are not plain text logs: compressed, binary, UTF-16.

Run through the installed ``vllm-sentinel`` command. Compressed files are made in the test by
the real tools where installed (``gzip``, ``xz``, ``zstd``, ``bzip2``) and by the libraries.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard

from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).with_name("vllm-sentinel"))
# A journald paste with three incarnations (the KV-cache crash, then ready).
LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"
VERDICT = "root cause kv_cache_insufficient: ValueError: To serve at least one request"


def _replay(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [COMMAND, "replay", *args], input=stdin, capture_output=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def plain() -> bytes:
    """What ``replay`` prints for the uncompressed log (every variant must print the same)."""
    result = _replay(str(LOG))
    assert result.returncode == 0, result.stderr.decode()
    assert VERDICT in result.stdout.decode()
    return result.stdout


def _one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert err.count("\n") == 1, err
    assert result.stdout == b"", "no timeline on an input error"
    return err.rstrip("\n")


class TestCompressed:
    """gzip, xz, zstd (and bzip2) are read transparently, told by their magic bytes."""

    @pytest.mark.parametrize(
        ("tool", "argv"),
        [
            ("gzip", ["gzip", "-c"]),
            ("xz", ["xz", "-c"]),
            ("zstd", ["zstd", "-q", "-c"]),
            ("bzip2", ["bzip2", "-c"]),
        ],
    )
    def test_made_by_the_real_tool(
        self, tool: str, argv: list[str], tmp_path: Path, plain: bytes
    ) -> None:
        """A file compressed by the tool replays exactly like the text it holds."""
        binary = require_binary(tool)
        packed = subprocess.run(
            [binary, *argv[1:], str(LOG)], capture_output=True, check=True
        ).stdout
        path = tmp_path / "incident.log.packed"  # no telling suffix: the magic bytes decide
        path.write_bytes(packed)
        result = _replay(str(path))
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout == plain

    @pytest.mark.parametrize(
        "compress",
        [gzip.compress, lzma.compress, bz2.compress, zstandard.ZstdCompressor().compress],
        ids=["gzip", "xz", "bzip2", "zstd"],
    )
    def test_on_stdin(self, compress: object, plain: bytes) -> None:
        """Compressed bytes on a pipe are decompressed too (no file name to go by)."""
        data = compress(LOG.read_bytes())  # type: ignore[operator]
        result = _replay("-", stdin=data)
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout == plain

    def test_concatenated_members_and_frames_are_all_read(self, tmp_path: Path) -> None:
        """``cat a.gz b.gz`` (and zstd frames one after another) is read to its end."""
        text = LOG.read_bytes()
        half = text.index(b"\n", len(text) // 2) + 1
        whole = _replay(str(LOG)).stdout
        for name, compress in (
            ("gz", gzip.compress),
            ("zst", zstandard.ZstdCompressor().compress),
            ("xz", lzma.compress),
        ):
            path = tmp_path / f"joined.{name}"
            path.write_bytes(compress(text[:half]) + compress(text[half:]))
            result = _replay(str(path))
            assert result.returncode == 0, (name, result.stderr.decode())
            assert result.stdout == whole, name

    def test_a_large_export_is_streamed(self, tmp_path: Path) -> None:
        """A compressed input far larger than a read (40 MiB of text) replays in chunks."""
        text = LOG.read_bytes()
        path = tmp_path / "big.log.zst"
        with path.open("wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as writer:
            for _ in range((40 << 20) // len(text) + 1):
                writer.write(text)
        result = _replay("--output", "json", str(path))
        assert result.returncode == 0, result.stderr.decode()
        assert b'"kv_cache_insufficient"' in result.stdout

    @pytest.mark.parametrize(
        ("suffix", "compress", "reason"),
        [
            ("gz", gzip.compress, "compressed file ended before the end-of-stream marker"),
            ("xz", lzma.compress, "compressed file ended before the end-of-stream marker"),
            ("zst", zstandard.ZstdCompressor().compress, "ended before the end of a frame"),
        ],
    )
    def test_truncated_is_one_line_and_exit_2(
        self, suffix: str, compress: object, reason: str, tmp_path: Path
    ) -> None:
        """A download cut short: one line naming the format and the reason, no timeline."""
        data = compress(LOG.read_bytes())  # type: ignore[operator]
        path = tmp_path / f"cut.log.{suffix}"
        path.write_bytes(data[: len(data) * 2 // 3])
        line = _one_error_line(_replay(str(path)))
        assert line.startswith(f"vllm-sentinel: {path}: corrupt "), line
        assert reason in line

    def test_damaged_gzip_is_one_line_and_exit_2(self, tmp_path: Path) -> None:
        """Bytes flipped inside a gzip stream: a CRC or data error, one line."""
        data = bytearray(gzip.compress(LOG.read_bytes()))
        for offset in range(len(data) // 2, len(data) // 2 + 64):
            data[offset] ^= 0x5A
        path = tmp_path / "damaged.gz"
        path.write_bytes(bytes(data))
        line = _one_error_line(_replay(str(path)))
        assert line.startswith(f"vllm-sentinel: {path}: corrupt gzip data ("), line

    def test_truncated_gzip_on_stdin(self) -> None:
        """A truncated stream on stdin is named ``stdin``."""
        data = gzip.compress(LOG.read_bytes())
        line = _one_error_line(_replay("-", stdin=data[:-100]))
        assert line.startswith("vllm-sentinel: stdin: corrupt gzip data"), line


class TestNotALog:
    """Binary input is refused in one line; text with a few odd bytes is still a log."""

    def test_an_executable_is_not_a_log(self) -> None:
        """``replay /usr/bin/python3``: one line, exit 2, no timeline."""
        python = os.path.realpath(sys.executable)
        line = _one_error_line(_replay(python))
        assert line == f"vllm-sentinel: {python}: not a log (binary data)"

    def test_an_image_is_not_a_log(self, tmp_path: Path) -> None:
        """A PNG screenshot (noise pixels, written with zlib as PNG specifies) is binary."""

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        width = height = 128
        pixels = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
        png = (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(pixels))
            + chunk(b"IEND", b"")
        )
        path = tmp_path / "screenshot.png"
        path.write_bytes(png)
        line = _one_error_line(_replay(str(path)))
        assert line == f"vllm-sentinel: {path}: not a log (binary data)"

    def test_compressed_binary_is_not_a_log(self, tmp_path: Path) -> None:
        """A gzipped executable is named as such."""
        path = tmp_path / "python.gz"
        path.write_bytes(
            gzip.compress(Path(os.path.realpath(sys.executable)).read_bytes()[:200_000])
        )
        line = _one_error_line(_replay(str(path)))
        assert line == f"vllm-sentinel: {path}: not a log (gzip-compressed binary data)"

    def test_archives_and_journal_files_say_what_to_do(self, tmp_path: Path) -> None:
        """A zip archive and a raw journal file each get their own hint."""
        archive = tmp_path / "logs.zip"
        with zipfile.ZipFile(archive, "w") as bundle:
            bundle.write(LOG, "vllm.log")
        assert _one_error_line(_replay(str(archive))).endswith(
            "not a log (zip archive: unpack it first)"
        )
        journal = tmp_path / "system.journal"
        journal.write_bytes(b"LPKSHHRH" + bytes(4096))
        assert "journalctl --file=FILE -o json" in _one_error_line(_replay(str(journal)))

    @pytest.mark.parametrize(
        ("name", "flags"),
        [
            ("logs.tar", ["-c"]),
            ("logs.tar", ["-c", "--format=posix"]),
            ("logs.tar.gz", ["-cz"]),
            ("logs.tgz", ["-cz"]),
            ("logs.tar.xz", ["-cJ"]),
            ("logs.tar.bz2", ["-cj"]),
            ("logs.tar.zst", ["-c", "--zstd"]),
        ],
    )
    def test_a_tar_archive_says_unpack_it(
        self, tmp_path: Path, name: str, flags: list[str]
    ) -> None:
        """A bug report's tarball (GNU and POSIX formats, compressed or not, by the real
        ``tar``) is one line and exit 2, however large the log in it."""
        require_binary("tar")
        if "--zstd" in flags:
            require_binary("zstd")
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "vllm.log").write_bytes(LOG.read_bytes() * 200)  # text after it
        path = tmp_path / name
        subprocess.run(["tar", *flags, "-f", str(path), "-C", str(tmp_path / "in"), "vllm.log"],
                       check=True)  # fmt: skip
        line = _one_error_line(_replay(str(path)))
        assert line == (
            f"vllm-sentinel: {path}: a tar archive: unpack it first (tar -xf {path}) and replay "
            "the log files in it"
        )

    def test_a_tar_archive_on_stdin_names_the_tar_flag(self, tmp_path: Path) -> None:
        """On stdin the command reads the archive from stdin, with the decompression flag."""
        (tmp_path / "vllm.log").write_bytes(LOG.read_bytes())
        data = subprocess.run(
            ["tar", "-cz", "-C", str(tmp_path), "vllm.log"], check=True, capture_output=True
        ).stdout
        line = _one_error_line(_replay("-", stdin=data))
        assert line == (
            "vllm-sentinel: stdin: a tar archive: unpack it first (tar -xzf -) and replay the "
            "log files in it"
        )

    def test_a_log_with_a_few_binary_bytes_still_replays(self, plain: bytes) -> None:
        """NUL bytes from a crashed writer, a journald blob note, colour and tqdm's ``\\r``."""
        lines = LOG.read_bytes().split(b"\n")
        lines.insert(3, b"\x00\x00\x00\x00 partial write \x00\x07\x01")
        lines.insert(7, b"Jan 28 10:40:08 host python3[12]: [3.1K blob data]")
        lines.insert(9, b"\x1b[32mloading\x1b[0m 10%\r 20%\r 30%")
        lines.insert(11, b"caf\xe9 au lait (Latin-1)")
        result = _replay("-", stdin=b"\n".join(lines))
        assert result.returncode == 0, result.stderr.decode()
        assert VERDICT in result.stdout.decode()

    @pytest.mark.parametrize(
        ("where", "gap"),
        [("start", 200_000), ("middle", 125_000), ("mid-line", 70_000)],
    )
    def test_a_gap_of_nul_bytes_is_a_gap_not_binary(
        self, tmp_path: Path, plain: bytes, where: str, gap: int
    ) -> None:
        """A file truncated while its writer kept writing at its old offset (logrotate's
        ``copytruncate``, a second ``cmd > file`` over a running server's log) holds a run of
        NUL bytes, often most of its bytes: the text around the run replays as if the run were
        a line break, with one warning (it was refused as binary data, and a run before a line
        glued to it hid that line)."""
        lines = LOG.read_bytes().split(b"\n")
        at = {"start": 0, "middle": len(lines) // 2, "mid-line": len(lines) // 2}[where]
        if where == "mid-line":  # the writer was cut inside a line: that line's head is lost
            lines[at] = lines[at][:20] + b"\x00" * gap
            data = b"\n".join(lines)
        else:
            data = b"\n".join(lines[:at]) + (b"\n" if at else b"") + b"\x00" * gap
            data += b"\n".join(lines[at:])
        path = tmp_path / "truncated.log"
        path.write_bytes(data)
        result = _replay(str(path))
        assert result.returncode == 0, result.stderr.decode()
        if where != "mid-line":
            assert result.stdout == plain
        else:
            assert VERDICT in result.stdout.decode()
        assert result.stderr.decode() == (
            f"vllm-sentinel: warning: {gap:,} NUL bytes in 1 run were read as a gap in the "
            "text (a file truncated while its writer kept writing, e.g. logrotate's "
            "copytruncate)\n"
        )

    def test_utf16_and_byte_order_marks(self, tmp_path: Path, plain: bytes) -> None:
        """UTF-16 (PowerShell's ``Out-File``) and a UTF-8 byte-order mark read as the text."""
        text = LOG.read_text(encoding="utf-8")
        for name, data in (
            ("utf16.log", text.encode("utf-16")),
            ("bom.log", b"\xef\xbb\xbf" + text.encode()),
            ("utf16.log.gz", gzip.compress(text.encode("utf-16"))),
        ):
            path = tmp_path / name
            path.write_bytes(data)
            result = _replay(str(path))
            assert result.returncode == 0, (name, result.stderr.decode())
            assert result.stdout == plain, name

    def test_one_bad_input_among_several_prints_no_timeline(self, tmp_path: Path) -> None:
        """The second of two inputs is binary: one line, exit 2, nothing of the first printed."""
        python = os.path.realpath(sys.executable)
        line = _one_error_line(_replay(str(LOG), python))
        assert line == f"vllm-sentinel: {python}: not a log (binary data)"
