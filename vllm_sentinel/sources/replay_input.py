"""Opening ``replay`` inputs (edge: reads files and stdin): decompression and a binary check.

``read_input`` turns a path (``-``: stdin) into the byte chunks ``replay.replay`` reads. The
format is told by the first bytes, never by the file name, so a pipe or a renamed file works
the same: gzip, xz and bzip2 are read with the standard library, zstd with the ``zstandard``
package (imported only when a zstd input is met). Everything is streamed in chunks of at most
``chunk_size`` bytes, compressed or not: a 2 GB compressed journal export never sits in
memory. UTF-16 text with its byte-order mark (Windows PowerShell's ``Out-File``) passes the
binary check; ``replay`` re-encodes it. A tar archive (a bug report's attachment) is told by
its header's ``ustar`` magic at byte 257, inside a compressed stream too, and refused with
the command that unpacks it (``TarArchiveError``).

The first block of text (after decompression) is sniffed: input that is mostly binary (an
executable, an image, an archive) is refused with ``NotALogError``; a log with a few binary
bytes (NUL, a journald blob, ANSI colour, tqdm's ``\\r``) is text and replays. Failures are
``InputError``\\ s whose ``str()`` is the one line the command prints after ``vllm-sentinel: ``.
"""

from __future__ import annotations

import codecs
import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from vllm_sentinel.engine.decode.line_buffer import NUL_GAP

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "COMPRESSIONS",
    "FOREIGN_FORMATS",
    "TAR_MAGIC",
    "TAR_MAGIC_OFFSET",
    "Compression",
    "CorruptInputError",
    "InputError",
    "NotALogError",
    "TarArchiveError",
    "UnreadableInputError",
    "is_binary",
    "read_input",
]

CHUNK_BYTES = 1 << 20
_SNIFF_BYTES = 64 * 1024
_MAX_SNIFF_BYTES = 16 << 20  # read past a leading gap of NUL bytes up to this much

_MAGIC_BYTES = 8
_ZSTD_SLICE = 4096  # compressed bytes per zstd call: bounds one call's output (RLE blocks)
# Bytes that never occur in text: C0 controls except TAB LF VT FF CR ESC (ANSI), and DEL.
_TEXT_BYTES = bytes(b for b in range(256) if b >= 0x20 and b != 0x7F) + b"\t\n\v\f\r\x1b\x08"
_MAX_CONTROL_RATIO = 0.10  # ELF and images are far above; a log with a few NULs far below
_MAX_INVALID_UTF8_RATIO = 0.25  # compressed or random bytes: about half are invalid UTF-8


class InputError(Exception):
    """A replay input that cannot be read as a log; ``str()`` is one line for the user."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


class UnreadableInputError(InputError):
    """Opening or reading failed (permission denied, a socket, EIO …)."""

    def __init__(self, name: str, error: OSError) -> None:
        reason = (error.strerror or str(error)).lower()
        super().__init__(name, reason)
        self.args = (f"cannot read {name}: {reason}",)
        self.reason = reason


class CorruptInputError(InputError):
    """A compressed input that does not decompress (truncated, damaged)."""


class NotALogError(InputError):
    """An input that is not text: an executable, an image, an archive, a journal file."""


class TarArchiveError(NotALogError):
    """A tar archive (a bug report's attachment), compressed or not: unpack it first."""

    def __init__(self, name: str, compression: Compression | None) -> None:
        if name != "stdin":
            command = f"tar -xf {name}"  # GNU and BSD tar tell the compression of a file
        elif compression is None:
            command = "tar -xf -"
        elif compression.tar_option.startswith("--"):
            command = f"tar {compression.tar_option} -xf -"
        else:
            command = f"tar -x{compression.tar_option}f -"
        super().__init__(
            name, f"a tar archive: unpack it first ({command}) and replay the log files in it"
        )


@dataclass(frozen=True, slots=True)
class Compression:
    """One compressed format ``replay`` reads: its name, magic number and specification,
    and GNU tar's option to read it from a pipe (a letter, ``z`` as in ``tar -xzf -``, or a
    long option)."""

    name: str
    magic: bytes
    source: str
    example: str
    tar_option: str


COMPRESSIONS: tuple[Compression, ...] = (
    Compression(
        "gzip", b"\x1f\x8b", "RFC 1952 (stdlib gzip; several members read)", "x.log.gz", "z"
    ),
    Compression("xz", b"\xfd7zXZ\x00", "XZ file format 1.2 (stdlib lzma)", "x.log.xz", "J"),
    Compression("zstd", b"\x28\xb5\x2f\xfd", "RFC 8878 (zstandard package)", "x.log.zst", "--zstd"),
    Compression("bzip2", b"BZh", "bzip2 1.0 (stdlib bz2)", "x.log.bz2", "j"),
)

TAR_MAGIC = b"ustar"
TAR_MAGIC_OFFSET = 257
"""A tar header's ``magic`` field (POSIX.1-1988 ustar and pax: ``ustar\\0``; GNU tar's
default format: ``ustar  ``), at byte 257 of the first 512-byte header: of the archive itself,
or of what a compressed input holds (``.tar.gz``, ``.tgz``, ``.tar.xz``, ``.tar.zst``)."""

FOREIGN_FORMATS: tuple[tuple[bytes, str], ...] = (
    (b"LPKSHHRH", "systemd journal file: replay `journalctl --file=FILE -o json` instead"),
    (b"PK\x03\x04", "zip archive: unpack it first"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive: unpack it first"),
    (b"\x04\x22\x4d\x18", "lz4 data: decompress it first"),
)
"""Magic numbers of inputs that are not logs, with what to say about each."""


class _Joined(io.RawIOBase):
    """``head`` then the rest of ``stream``: the bytes sniffed are read again."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            size = min(len(view), len(self._head))
            view[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        data = self._stream.read(len(view))
        view[: len(data)] = data
        return len(data)


def _read_full(stream: BinaryIO, size: int) -> bytes:
    """Read ``size`` bytes (fewer only at end of input), however a pipe delivers them."""
    parts: list[bytes] = []
    have = 0
    while have < size:
        more = stream.read(size - have)
        if not more:
            break
        parts.append(more)
        have += len(more)
    return b"".join(parts)


def _corrupt(name: str, fmt: str, error: BaseException) -> CorruptInputError:
    text = str(error) or type(error).__name__
    return CorruptInputError(name, f"corrupt {fmt} data ({text[:1].lower() + text[1:]})")


def _stdlib_chunks(fmt: str, raw: io.RawIOBase, chunk_size: int, name: str) -> Iterator[bytes]:
    """Decompress with the standard library's file class for ``fmt`` (bounded reads).

    A truncated stream raises ``EOFError``; damaged data ``zlib.error``, ``lzma.LZMAError``
    or an ``OSError`` without an errno (``gzip.BadGzipFile``, bz2's invalid data); an
    ``OSError`` with an errno is the file itself failing to read.
    """
    import bz2
    import gzip
    import lzma
    import zlib

    buffered = io.BufferedReader(raw)
    opener: dict[str, Callable[[], io.BufferedIOBase]] = {
        "gzip": lambda: gzip.GzipFile(fileobj=buffered),
        "xz": lambda: lzma.LZMAFile(buffered),  # noqa: SIM115 (closed by the with below)
        "bzip2": lambda: bz2.BZ2File(buffered),
    }
    with opener[fmt]() as reader:
        while True:
            try:
                chunk = reader.read(chunk_size)
            except OSError as error:
                if error.errno is not None:
                    raise UnreadableInputError(name, error) from error
                raise _corrupt(name, fmt, error) from error
            except (EOFError, zlib.error, lzma.LZMAError) as error:
                raise _corrupt(name, fmt, error) from error
            if not chunk:
                return
            yield chunk


def _zstd_chunks(raw: io.RawIOBase, chunk_size: int, name: str) -> Iterator[bytes]:
    """Decompress zstd frames one after another; a frame cut short is an error.

    ``zstandard``'s stream reader ends silently at a truncated frame, so the frames are
    followed with a decompression object fed in small slices (which also bounds what one call
    can return: a few bytes of RLE blocks expand to megabytes).
    """
    try:
        import zstandard
    except ImportError as error:  # a dependency, but an install may lack it
        raise InputError(name, "zstd data needs the zstandard package") from error
    decompressor = zstandard.ZstdDecompressor()
    state = decompressor.decompressobj()
    fed = False
    pending: list[bytes] = []
    pending_size = 0
    stream = io.BufferedReader(raw)
    while data := stream.read(chunk_size):
        for start in range(0, len(data), _ZSTD_SLICE):
            piece = data[start : start + _ZSTD_SLICE]
            while piece:
                try:
                    out = state.decompress(piece)
                except zstandard.ZstdError as error:
                    raise _corrupt(name, "zstd", error) from error
                fed, piece = True, b""
                if state.eof:  # the frame ended: what follows is the next frame
                    piece = state.unused_data
                    state = decompressor.decompressobj()
                    fed = False
                if out:
                    pending.append(out)
                    pending_size += len(out)
            if pending_size >= chunk_size:
                yield b"".join(pending)
                pending, pending_size = [], 0
    if pending:
        yield b"".join(pending)
    if fed:
        raise _corrupt(name, "zstd", EOFError("compressed file ended before the end of a frame"))


def _decompressed(
    fmt: str, head: bytes, stream: BinaryIO, chunk_size: int, name: str
) -> Iterator[bytes]:
    raw = _Joined(head, stream)
    if fmt == "zstd":
        return _zstd_chunks(raw, chunk_size, name)
    return _stdlib_chunks(fmt, raw, chunk_size, name)


def is_binary(sample: bytes) -> bool:
    """Whether ``sample`` (the first block of an input) is binary data, not text.

    Text may hold a few odd bytes (NUL from a crashed writer, a journald blob, ANSI colour,
    tqdm's ``\\r``, Latin-1 letters); binary data holds many: more than 10 % control bytes
    (an executable's NUL padding), or more than 25 % bytes that are not valid UTF-8 (an image,
    compressed data). Runs of ``NUL_GAP`` (8 or more NUL bytes: the gap a file truncated under
    a running writer keeps) are left out of the count; a sample of nothing else is text.
    """
    sample = NUL_GAP.sub(b"", sample)  # a truncated file's gap is not binary data
    if not sample:
        return False
    controls = len(sample.translate(None, _TEXT_BYTES))
    if controls > len(sample) * _MAX_CONTROL_RATIO:
        return True
    if sample.isascii():
        return False
    invalid = sample.decode("utf-8", "replace").count("\ufffd")
    return invalid > len(sample) * _MAX_INVALID_UTF8_RATIO


def _text_chunks(
    chunks: Iterator[bytes], name: str, compression: Compression | None = None
) -> Iterator[bytes]:
    """Sniff the first block of text, then hand on every chunk."""
    what = f"{compression.name}-compressed " if compression is not None else ""
    first = b""
    for chunk in chunks:
        first += chunk
        if len(first) >= _SNIFF_BYTES and (
            len(first) >= _MAX_SNIFF_BYTES or len(NUL_GAP.sub(b"", first)) >= _SNIFF_BYTES
        ):  # a gap of NUL bytes at the start: sniff the text after it
            break
    if not first:
        return
    if first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):  # replay re-encodes it
        yield first
        yield from chunks
        return
    sample = first.removeprefix(codecs.BOM_UTF8)
    if sample[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + len(TAR_MAGIC)] == TAR_MAGIC:
        raise TarArchiveError(name, compression)
    for magic, meaning in FOREIGN_FORMATS:
        if sample.startswith(magic):
            raise NotALogError(name, f"not a log ({meaning})")
    if is_binary(NUL_GAP.sub(b"", sample)[:_SNIFF_BYTES]):
        raise NotALogError(name, f"not a log ({what}binary data)")
    yield first
    yield from chunks


def _raw_chunks(stream: BinaryIO, head: bytes, chunk_size: int) -> Iterator[bytes]:
    if head:
        yield head
    while chunk := stream.read(chunk_size):
        yield chunk


def _stream_chunks(stream: BinaryIO, name: str, chunk_size: int) -> Iterator[bytes]:
    head = _read_full(stream, _MAGIC_BYTES)
    for compression in COMPRESSIONS:
        if head.startswith(compression.magic):
            chunks = _decompressed(compression.name, head, stream, chunk_size, name)
            yield from _text_chunks(chunks, name, compression)
            return
    yield from _text_chunks(_raw_chunks(stream, head, chunk_size), name)


def read_input(path: str, *, chunk_size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Yield the text of a replay input in chunks of about ``chunk_size`` bytes.

    Args:
        path: a file, a named pipe, ``/dev/stdin``, a process substitution; ``-`` is stdin.
        chunk_size: bytes read (and decompressed) at a time.

    Raises (while iterating):
        UnreadableInputError: opening or reading failed.
        CorruptInputError: compressed data that does not decompress (truncated, damaged).
        NotALogError: binary data, an archive or a journal file (``TarArchiveError``: a
            tar archive, compressed or not).
        InputError: zstd input without the zstandard package.
    """
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            yield from _stream_chunks(sys.stdin.buffer, name, chunk_size)
            return
        with open(path, "rb") as stream:
            yield from _stream_chunks(stream, name, chunk_size)
    except InputError:
        raise
    except OSError as error:
        raise UnreadableInputError(name, error) from error
