"""Fuzz the readers and the engine: bytes → decoder → trackers → snapshot → /metrics and JSON.

Coverage-guided with atheris (libFuzzer) when it is installed (``pip install atheris``), else a
hypothesis-driven loop over the same target. Either way each input runs through
``run_one(data)``, which fails (raises) when:

* anything in the decoders, the tracker, the exposition or the JSON report raises;
* a tracker buffer is over its limit (``tests.support.hostile.assert_tracker_bounded``);
* one input takes longer than ``--max-input-seconds`` (a quadratic regex, an endless loop).

The first byte picks a mode: plain text, raw ``journalctl -o json`` bytes, or journal entries
built from the input (corpus lines from the golden logs mutated by the input, systemd verdicts,
times that jump, fields of the wrong type) so that the fuzzer reaches the tracker's decisions.

Usage (from the repository root)::

    python -m tests.property.fuzz_engine --seconds 300            # atheris if present
    python -m tests.property.fuzz_engine --seconds 60 --hypothesis
    python -m tests.property.fuzz_engine --seconds 300 CORPUS_DIR -- -jobs=4   # libFuzzer flags

It prints how many inputs ran and exits non-zero with the failing input saved
(``--artifacts``, default ``./fuzz-artifacts/``) when it finds a problem.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import atheris
except ImportError:  # pragma: no cover - depends on the environment
    atheris = None

# Coverage instrumentation only when run as a script: under pytest the modules are imported.
_instrument = (
    atheris.instrument_imports(include=["vllm_sentinel"])
    if atheris is not None and __name__ == "__main__"
    else contextlib.nullcontext()
)
with _instrument:
    import orjson
    from prometheus_client import generate_latest

    from tests.support.hostile import (
        CORPUS,
        SYSTEMD_MESSAGES,
        T0,
        UNIT,
        assert_tracker_bounded,
        journal_cycle,
    )
    from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
    from vllm_sentinel.engine.decode.record import Record
    from vllm_sentinel.engine.decode.text_log import TextLogDecoder
    from vllm_sentinel.engine.report import to_json
    from vllm_sentinel.engine.snapshot import HostSnapshot, Snapshot
    from vllm_sentinel.engine.tracker import TrackerSet, UnitTracker
    from vllm_sentinel.serve.exporter import SentinelCollector, make_registry

__all__ = ["main", "run_one", "seeds"]

_MAX_INCARNATIONS = 4
_T0_US = int(T0.timestamp() * 1_000_000)
_INVOCATIONS = ("a" * 32, "b" * 32, "c" * 32, "d" * 32, "e" * 32)
_FIELD_VALUES: tuple[object, ...] = (None, 1, -1, 2**63, 1.5, True, [], [1, "x"], {"a": 1}, "")
max_input_seconds = 2.0


class _Input:
    """A tiny FuzzedDataProvider that works with or without atheris (hypothesis mode)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def integer(self, size: int) -> int:
        value = 0
        for _ in range(size):
            value = value << 8 | self.byte()
        return value

    def take(self, count: int) -> bytes:
        piece = self.data[self.pos : self.pos + count]
        self.pos += len(piece)
        return piece

    def rest(self) -> bytes:
        return self.take(self.remaining())


def _message(source: _Input) -> object:
    choice = source.byte() % 8
    if choice <= 3:
        line = CORPUS[source.integer(2) % len(CORPUS)]
        cut = source.integer(2) % (len(line) + 1)
        noise = source.take(source.byte() % 24).decode("utf-8", "replace")
        return line[:cut] + noise + line[cut:] if choice else line
    if choice == 4:
        return list(source.take(source.byte()))  # a byte array (invalid UTF-8, NUL, ESC)
    if choice == 5:
        return source.take(source.byte()).decode("utf-8", "replace")
    if choice == 6:
        return "\n".join(CORPUS[source.integer(2) % len(CORPUS)] for _ in range(source.byte() % 6))
    return _FIELD_VALUES[source.byte() % len(_FIELD_VALUES)]


def _entries(source: _Input) -> Iterator[bytes]:
    realtime = _T0_US
    seqnum = source.integer(2)
    while source.remaining() > 0:
        kind = source.byte()
        step = source.integer(4)
        realtime += step * 1000 if kind & 0x80 == 0 else -step * 1_000_000_000
        seqnum += 1 if kind & 0x40 == 0 else -(source.byte() % 4)
        invocation = _INVOCATIONS[source.byte() % len(_INVOCATIONS)]
        entry: dict[str, object] = {
            "__CURSOR": f"s=f0;i={max(seqnum, 0):x};b=0",
            "__REALTIME_TIMESTAMP": str(realtime),
        }
        if kind % 5 == 0:
            message, message_id = SYSTEMD_MESSAGES[source.byte() % len(SYSTEMD_MESSAGES)]
            entry |= {
                "MESSAGE": message,
                "_PID": "1",
                "SYSLOG_IDENTIFIER": "systemd",
                "UNIT": UNIT,
                "INVOCATION_ID": invocation,
                "_SYSTEMD_UNIT": "init.scope",
            }
            if message_id:
                entry["MESSAGE_ID"] = message_id
        else:
            entry |= {
                "MESSAGE": _message(source),
                "_PID": str(100 + source.byte() % 8),
                "_SYSTEMD_UNIT": UNIT,
                "_SYSTEMD_INVOCATION_ID": invocation,
            }
        if kind % 7 == 0:  # one field of the wrong type
            fields = (
                "_PID",
                "PRIORITY",
                "__REALTIME_TIMESTAMP",
                "_SYSTEMD_UNIT",
                "UNIT",
                "INVOCATION_ID",
                "MESSAGE_ID",
                "__CURSOR",
                "SYSLOG_IDENTIFIER",
            )
            entry[fields[source.byte() % len(fields)]] = _message(source)
        yield orjson.dumps(entry)


def _chunks(source: _Input, data: bytes) -> Iterator[bytes]:
    sizes = [1 + source.integer(2) for _ in range(4)]
    start, index = 0, 0
    while start < len(data):
        size = sizes[index % 4]
        yield data[start : start + size]
        start += size
        index += 1


def run_one(data: bytes) -> None:
    """Run one input through the whole engine; raise on any failure (see the module doc)."""
    started = time.perf_counter()
    source = _Input(data)
    mode = source.byte() % 3
    decoder: JournalJsonDecoder | TextLogDecoder
    if mode == 0:
        decoder = TextLogDecoder(UNIT, "h", max_line_bytes=4096)
        payload = source.rest()
    elif mode == 1:
        decoder = JournalJsonDecoder("h", max_line_bytes=4096)
        payload = source.rest()
    else:
        decoder = JournalJsonDecoder("h")
        payload = b"\n".join(_entries(source)) + b"\n"
    chunker = _Input(data[:8])

    def factory(unit: str, host: str | None) -> UnitTracker:
        return UnitTracker(unit, host, max_incarnations=_MAX_INCARNATIONS)

    trackers = TrackerSet(factory=factory)
    for piece in _chunks(chunker, payload):
        for record in decoder.feed(piece):
            assert isinstance(record, Record)
            trackers.feed(record)
        assert decoder.pending_bytes <= decoder.max_line_bytes
    for record in decoder.flush():
        trackers.feed(record)
    units = []
    for tracker in trackers:
        assert_tracker_bounded(tracker, _MAX_INCARNATIONS, max_invocation_id=1 << 20)
        tracker.finish()
        units.append(tracker.snapshot())
    snapshot = Snapshot((HostSnapshot("h", tuple(units)),), T0)
    generate_latest(make_registry(SentinelCollector(lambda: snapshot)))
    orjson.dumps(to_json(units))
    elapsed = time.perf_counter() - started
    if elapsed > max_input_seconds:
        raise TimeoutError(f"one input of {len(data)} bytes took {elapsed:.2f}s")


def seeds() -> Iterator[bytes]:
    """Starting inputs: the golden logs as text, the golden journal, corpus lines as entries."""
    golden = Path(__file__).resolve().parent.parent / "golden"
    for path in sorted((golden / "logs").glob("*.log"))[:12]:
        yield b"\x00" + path.read_bytes()[:16384]
    yield b"\x01" + b"\n".join(journal_cycle(0, 1, T0))
    for index in range(0, len(CORPUS), 7):
        yield bytes([2, 0, 1, 1, 0, 0, 0, 1, 0, index % 256, index >> 8, 0, 0, 0])


def _fuzz_with_atheris(seconds: int, corpus: Path, artifacts: Path, extra: list[str]) -> int:
    assert atheris is not None
    for index, seed in enumerate(seeds()):
        (corpus / f"seed-{index:03d}").write_bytes(seed)
    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={seconds}",
        "-max_len=65536",
        f"-timeout={int(max_input_seconds * 5)}",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
        *extra,
    ]
    atheris.Setup(argv, run_one)
    atheris.Fuzz()
    return 0


def _fuzz_with_hypothesis(seconds: int, artifacts: Path) -> int:
    seed_list = list(seeds())
    inputs = st.one_of(
        st.binary(max_size=8192),
        st.sampled_from(seed_list),
        st.builds(
            lambda seed, cut, junk: seed[:cut] + junk + seed[cut:],
            st.sampled_from(seed_list),
            st.integers(0, 20000),
            st.binary(max_size=64),
        ),
    )
    runs = 0

    @settings(
        max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(inputs)
    def batch(data: bytes) -> None:
        nonlocal runs
        runs += 1
        try:
            run_one(data)
        except BaseException:
            (artifacts / f"crash-{runs}").write_bytes(data)
            raise

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch()
    print(f"hypothesis fuzz: {runs} inputs in {seconds}s, no failure")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and fuzz for the given time."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz")
    parser.add_argument("--hypothesis", action="store_true", help="never use atheris")
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-artifacts"))
    parser.add_argument("--max-input-seconds", type=float, default=2.0)
    parser.add_argument("corpus", nargs="?", type=Path, help="libFuzzer corpus directory")
    parser.add_argument("libfuzzer", nargs="*", help="extra libFuzzer flags, after --")
    args = parser.parse_args(argv)
    global max_input_seconds  # noqa: PLW0603  # the target reads it; a CLI knob, set once
    max_input_seconds = args.max_input_seconds
    args.artifacts.mkdir(parents=True, exist_ok=True)
    if atheris is None or args.hypothesis:
        return _fuzz_with_hypothesis(args.seconds, args.artifacts)
    corpus = args.corpus or Path(tempfile.mkdtemp(prefix="sentinel-fuzz-"))
    corpus.mkdir(parents=True, exist_ok=True)
    return _fuzz_with_atheris(args.seconds, corpus, args.artifacts, args.libfuzzer)


if __name__ == "__main__":
    sys.exit(main())
