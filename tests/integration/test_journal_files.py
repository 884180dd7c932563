"""Real journal files written by systemd-journal-remote, read back by the real journalctl.

Proves that ``tests.support.journal_writer`` writes what journald would have stored, and that
``JournalJsonDecoder`` decodes what ``journalctl -o json`` really prints for it: byte arrays
for control characters and invalid UTF-8, ``null`` for big fields without ``-a``, systemd's own
messages about a unit, and entries appended while ``journalctl -f`` follows the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.support.journal_writer import (
    MESSAGE_ID_STARTED,
    JournalWriter,
    encode_entry,
    parse_lines,
    read_journal,
    service_line,
    to_realtime_us,
    unit_started,
)
from tests.support.make_incident import main as make_incident_main
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record

UNIT = "vllm-kimi-k25.service"
INVOCATION = "0f3c1a2b4d5e6f708192a3b4c5d6e7f8"
T0 = datetime(2026, 11, 28, 23, 36, 21, 123456, tzinfo=UTC)
T0_US = to_realtime_us(T0)

ANSI_MESSAGE = (
    b"\x1b[1;36m(VllmWorkerProcess pid=5)\x1b[0;0m INFO 11-28 23:36:21 "
    b"[model_runner.py:1051] Loading model weights took 71.43 GB"
)
CR_MESSAGE = (
    "\rLoading safetensors checkpoint shards:  50% Completed | 32/64 [04:30<04:30,  8.40s/it]"
)
INVALID_UTF8_MESSAGE = b"(Worker_TP7 pid=221350) bad bytes \xff\xfe caf\xc3 end"
BIG_MESSAGE = "(APIServer pid=221200) INFO non-default args: {" + "x" * 5000 + "}"
MULTILINE_MESSAGE = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>'
UTF8_MESSAGE = "Loading shards ██████▌ 65% — ok"


def _entries() -> list[dict[str, str | bytes | int]]:
    def at(seconds: int) -> int:
        return T0_US + seconds * 1_000_000

    return [
        unit_started(UNIT, INVOCATION, at(0), "vLLM Kimi K2.5"),
        service_line(UNIT, INVOCATION, 5, ANSI_MESSAGE, at(1)),
        service_line(UNIT, INVOCATION, 221343, CR_MESSAGE, at(2)),
        service_line(UNIT, INVOCATION, 221350, INVALID_UTF8_MESSAGE, at(3), priority=3),
        service_line(UNIT, INVOCATION, 221200, BIG_MESSAGE, at(4)),
        service_line(UNIT, INVOCATION, 221200, MULTILINE_MESSAGE, at(5)),
        service_line(UNIT, INVOCATION, 221343, UTF8_MESSAGE, at(6)),
    ]


def _decode(lines: list[bytes], host: str = "llm-two") -> tuple[list[Record], JournalJsonDecoder]:
    decoder = JournalJsonDecoder(host)
    records = decoder.feed(b"\n".join(lines) + b"\n")
    records += decoder.flush()
    return records, decoder


class TestEncodeEntry:
    """The Journal Export Format serialiser (pure, no binary needed)."""

    def test_plain_text_uses_text_form(self) -> None:
        """A printable UTF-8 value is written as KEY=value."""
        data = encode_entry({"__REALTIME_TIMESTAMP": 12, "MESSAGE": "héllo"})
        assert data == "__REALTIME_TIMESTAMP=12\nMESSAGE=héllo\n\n".encode()

    @pytest.mark.parametrize(
        "value",
        [b"a\nb", b"\x1b[0m", b"cr\r", b"\xff\xfe", b"nul\x00byte"],
        ids=["newline", "ansi", "carriage-return", "invalid-utf8", "nul"],
    )
    def test_binary_values_use_length_prefixed_form(self, value: bytes) -> None:
        """Newlines, control characters and non-UTF-8 bytes use KEY\\n + u64le length + bytes."""
        data = encode_entry({"__REALTIME_TIMESTAMP": "1", "MESSAGE": value})
        assert data == (
            b"__REALTIME_TIMESTAMP=1\nMESSAGE\n" + struct.pack("<Q", len(value)) + value + b"\n\n"
        )

    @pytest.mark.parametrize("name", ["message", "MES=SAGE", "A\nB", "", "X" * 65, "__CURSOR"])
    def test_invalid_field_names_are_refused(self, name: str) -> None:
        """A name journald would drop (or an injection attempt) raises instead."""
        with pytest.raises(ValueError, match="invalid journal field name"):
            encode_entry({"__REALTIME_TIMESTAMP": 1, name: "v"})

    def test_realtime_is_required(self) -> None:
        """journal-remote needs __REALTIME_TIMESTAMP, so a missing one is an error here."""
        with pytest.raises(ValueError, match="__REALTIME_TIMESTAMP"):
            encode_entry({"MESSAGE": "x"})

    def test_realtime_us_is_exact(self) -> None:
        """Aware datetimes convert to integral microseconds without float rounding."""
        assert to_realtime_us(datetime(2026, 11, 28, 23, 35, 58, 1, tzinfo=UTC)) == (
            1795908958000001  # date -u -d "2026-11-28 23:35:58" +%s
        )


@pytest.mark.integration
class TestJournalRoundTrip:
    """Entries written with journal-remote and read with journalctl -o json."""

    def test_raw_json_shapes_match_journalctl_rules(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """Control chars and bad UTF-8 become byte arrays, others strings, big fields null w/o -a."""
        journal_writer.write_and_flush(_entries())
        lines = journal_writer.wait_until_readable(7)
        raw = [entry["MESSAGE"] for entry in parse_lines(lines)]
        assert raw[0] == f"Started {UNIT} - vLLM Kimi K2.5."
        assert raw[1] == list(ANSI_MESSAGE)
        assert raw[2] == list(CR_MESSAGE.encode())
        assert raw[3] == list(INVALID_UTF8_MESSAGE)
        assert raw[4] == BIG_MESSAGE
        assert raw[5] == MULTILINE_MESSAGE
        assert raw[6] == UTF8_MESSAGE
        short = parse_lines(
            read_journal(journal_writer.path, journalctl=journalctl, all_fields=False)
        )
        assert short[4]["MESSAGE"] is None
        assert short[1]["MESSAGE"] == list(ANSI_MESSAGE)

    def test_decoder_reads_every_field_back(self, journal_writer: JournalWriter) -> None:
        """Messages, units, invocation ids, pids and realtimes decode exactly."""
        journal_writer.write_and_flush(_entries())
        records, decoder = _decode(journal_writer.wait_until_readable(7))
        assert [r.message for r in records] == [
            f"Started {UNIT} - vLLM Kimi K2.5.",
            "\x1b[1;36m(VllmWorkerProcess pid=5)\x1b[0;0m INFO 11-28 23:36:21 "
            "[model_runner.py:1051] Loading model weights took 71.43 GB",
            CR_MESSAGE,
            "(Worker_TP7 pid=221350) bad bytes \ufffd\ufffd caf\ufffd end",
            BIG_MESSAGE,
            MULTILINE_MESSAGE,
            UTF8_MESSAGE,
        ]
        assert {r.unit for r in records} == {UNIT}
        assert {r.invocation_id for r in records} == {INVOCATION}
        assert {r.host for r in records} == {"llm-two"}
        assert [r.pid for r in records] == [1, 5, 221343, 221350, 221200, 221200, 221343]
        assert [r.realtime for r in records] == [
            datetime(2026, 11, 28, 23, 36, 21 + i, 123456, tzinfo=UTC) for i in range(7)
        ]
        assert [r.from_manager for r in records] == [True] + [False] * 6
        assert records[0].message_id == MESSAGE_ID_STARTED
        assert records[0].syslog_identifier == "systemd"
        assert records[3].priority == 3
        assert all(r.cursor and r.cursor.startswith("s=") for r in records)
        assert decoder.last_cursor == records[-1].cursor
        assert not decoder.skipped

    def test_big_field_is_null_without_all(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """Without -a journalctl prints the >4096-byte MESSAGE as null; the decoder counts it."""
        journal_writer.write_and_flush(_entries())
        journal_writer.wait_until_readable(7)
        lines = read_journal(journal_writer.path, journalctl=journalctl, all_fields=False)
        records, decoder = _decode(lines)
        assert len(records) == 7
        assert records[4].message == ""
        assert records[4].pid == 221200
        assert decoder.skipped == {"message_null": 1}
        assert records[1].message.startswith("\x1b[1;36m(VllmWorkerProcess pid=5)")

    def test_unit_filter_includes_systemd_messages(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """journalctl -u UNIT matches the service's lines and PID 1's UNIT= lines, nothing else."""
        other = "other.service"
        journal_writer.write_and_flush(
            [
                *_entries(),
                service_line(other, "1" * 32, 77, "not ours", T0_US + 10_000_000),
                unit_started(other, "1" * 32, T0_US),
            ]
        )
        journal_writer.wait_until_readable(9)
        result = subprocess.run(
            [
                journalctl,
                f"--file={journal_writer.path}",
                "-u",
                UNIT,
                "-o",
                "json",
                "-a",
                "-n",
                "all",
                "--no-pager",
            ],
            capture_output=True,
            check=True,
            timeout=30,
        )
        records, _ = _decode(result.stdout.splitlines())
        assert len(records) == 7
        assert {r.unit for r in records} == {UNIT}

    def test_after_cursor_resumes_exactly(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """--after-cursor with a decoded cursor returns only the entries after it."""
        journal_writer.write_and_flush(_entries())
        records, _ = _decode(journal_writer.wait_until_readable(7))
        result = subprocess.run(
            [
                journalctl,
                f"--file={journal_writer.path}",
                "-o",
                "json",
                "-a",
                f"--after-cursor={records[2].cursor}",
                "--no-pager",
            ],
            capture_output=True,
            check=True,
            timeout=30,
        )
        rest, _ = _decode(result.stdout.splitlines())
        assert [r.cursor for r in rest] == [r.cursor for r in records[3:]]

    def test_wait_until_readable_times_out(self, journal_writer: JournalWriter) -> None:
        """Waiting for more entries than were written fails at the deadline, naming the count."""
        journal_writer.write_and_flush(_entries()[:2])
        with pytest.raises(TimeoutError, match="2 of 3 entries"):
            journal_writer.wait_until_readable(3, timeout=0.3)

    def test_close_reports_entries_and_leaves_a_readable_file(
        self, tmp_path: Path, journal_remote: str, journalctl: str
    ) -> None:
        """Used as a context manager the writer closes cleanly and the file stays readable."""
        directory = tmp_path / "cm"
        directory.mkdir()
        with JournalWriter(directory, "cm", binary=journal_remote, journalctl=journalctl) as w:
            w.write(_entries())
        assert w.returncode == 0
        assert w.entries_written == 7
        assert len(read_journal(w.path, journalctl=journalctl)) == 7


async def _read_json_lines(
    stream: asyncio.StreamReader, count: int, timeout_seconds: float
) -> list[dict[str, object]]:
    """Read ``count`` JSON lines from ``stream``, failing at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    entries: list[dict[str, object]] = []
    while len(entries) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"{len(entries)} of {count} lines before the deadline")
        line = await asyncio.wait_for(stream.readline(), remaining)
        if not line:
            raise EOFError(f"journalctl ended after {len(entries)} of {count} lines")
        entries.append(orjson.loads(line))
    return entries


@contextlib.asynccontextmanager
async def _follow(
    journalctl: str, writer: JournalWriter
) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        journalctl,
        f"--file={writer.path}",
        "-o",
        "json",
        "-a",
        "-f",
        "-n",
        "all",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 10)


@pytest.mark.integration
class TestLiveFollow:
    """journalctl -f on a file that journal-remote is still appending to."""

    @pytest.mark.asyncio
    async def test_entries_written_after_follow_started_arrive(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """Entries flushed while journalctl -f runs are printed by it, in order, decodable."""
        entries = _entries()
        journal_writer.write_and_flush(entries[:1])
        journal_writer.wait_until_readable(1)  # the follower needs the file to exist
        async with _follow(journalctl, journal_writer) as follower:
            assert follower.stdout is not None
            first = await _read_json_lines(follower.stdout, 1, timeout_seconds=10)
            assert first[0]["MESSAGE"] == entries[0]["MESSAGE"]
            journal_writer.write_and_flush(entries[1:])
            later = await _read_json_lines(follower.stdout, 6, timeout_seconds=10)
        decoder = JournalJsonDecoder("llm-two")
        records = [decoder.decode_entry(entry) for entry in later]
        assert [r.message for r in records if r] == [
            ANSI_MESSAGE.decode(),
            CR_MESSAGE,
            INVALID_UTF8_MESSAGE.decode("utf-8", errors="replace"),
            BIG_MESSAGE,
            MULTILINE_MESSAGE,
            UTF8_MESSAGE,
        ]

    @pytest.mark.asyncio
    async def test_a_burst_loses_nothing(
        self, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """1,000 entries flushed at once while following all arrive, in write order."""
        journal_writer.write_and_flush([service_line(UNIT, INVOCATION, 1, "first", T0_US)])
        journal_writer.wait_until_readable(1)
        async with _follow(journalctl, journal_writer) as follower:
            assert follower.stdout is not None
            await _read_json_lines(follower.stdout, 1, timeout_seconds=10)
            journal_writer.write_and_flush(
                service_line(UNIT, INVOCATION, 2, f"line {i}", T0_US + i) for i in range(1000)
            )
            later = await _read_json_lines(follower.stdout, 1000, timeout_seconds=30)
        assert [entry["MESSAGE"] for entry in later] == [f"line {i}" for i in range(1000)]


GOLDEN = Path(__file__).parents[1] / "golden" / "journal" / "001-kimi-k25-flashinfer-restart.jsonl"


def _without_cursor(line: bytes) -> dict[str, object]:
    entry: dict[str, object] = orjson.loads(line)
    entry.pop("__CURSOR")
    return entry


class TestGoldenIncident:
    """The committed journal incident 001 and its generator."""

    def test_golden_file_has_the_incident_shape(self) -> None:
        """Two invocations, byte-array worker lines, and A's root cause delivered after B started."""
        lines = GOLDEN.read_bytes().splitlines()
        assert 100 < len(lines) < 400
        records, decoder = _decode(lines)
        assert len(records) == len(lines)
        assert not decoder.skipped
        assert {r.unit for r in records} == {"vllm-kimi-k25.service"}
        invocations = list(dict.fromkeys(r.invocation_id for r in records))
        assert len(invocations) == 2
        first, second = invocations
        started = [
            i
            for i, r in enumerate(records)
            if r.from_manager and r.message_id == MESSAGE_ID_STARTED
        ]
        assert [records[i].invocation_id for i in started] == [first, second]
        late = [r for r in records[started[1] + 1 :] if r.invocation_id == first]
        assert len(late) == 4
        assert late[-1].message.endswith(
            "RuntimeError: flashinfer-cubin version (0.6.3) does not match flashinfer version "
            "(0.6.4). Please install the same version of both packages. Set "
            "FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
        )
        restarted_at = records[started[1]].realtime
        assert restarted_at is not None
        assert all(r.realtime is not None and r.realtime < restarted_at for r in late)
        raw = [orjson.loads(line) for line in lines]
        tp7 = [e for e in raw if e.get("_PID") == "221350"]
        assert tp7 and all(isinstance(e["MESSAGE"], list) for e in tp7)
        assert records[0].realtime == datetime(2026, 11, 28, 23, 35, 58, 104233, tzinfo=UTC)
        assert records[-1].message.endswith("Application startup complete.")

    @pytest.mark.integration
    def test_generator_reproduces_the_golden_file(
        self, tmp_path: Path, journalctl: str, journal_remote: str
    ) -> None:
        """make_incident regenerates the same entries (only cursors may differ)."""
        out = tmp_path / "incident.jsonl"
        code = make_incident_main(
            [str(out), "--journal-remote", journal_remote, "--journalctl", journalctl]
        )
        assert code == 0
        fresh = [_without_cursor(line) for line in out.read_bytes().splitlines()]
        golden = [_without_cursor(line) for line in GOLDEN.read_bytes().splitlines()]
        assert fresh == golden


@pytest.mark.integration
class TestFollowUnderLoad:
    """A busy journal written live: every entry reaches the follower (issue 15 §9)."""

    def test_every_entry_written_at_a_high_rate_is_followed(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """Eight units write 10,000 entries/s for 6 s (journal-remote, live): the daemon's
        follow command, as ``JournalFollower`` builds it, delivers every one. The same command
        with ``--unit`` matches (what the follower used before) runs beside it: systemd 252's
        ``journalctl --follow`` with several match terms skips runs of entries appended while
        it reads (4 to 30 of 130,000 in every run measured here), which is where the
        footprint benchmark's records went; its count is printed, not asserted (a race)."""
        from vllm_sentinel.sources.journal import build_journalctl_argv

        units = tuple(f"vllm-{n}.service" for n in range(8))
        directory = journal_writer.path.parent
        journal_writer.write_and_flush(
            [service_line(u, f"{n + 1:032x}", 100 + n, "hello", T0_US) for n, u in enumerate(units)]
        )
        lines = journal_writer.wait_until_readable(len(units))
        cursor = orjson.loads(lines[-1])["__CURSOR"]
        args = (f"--directory={directory}",)
        ours = build_journalctl_argv((), args, follow=True, cursor=cursor, lines="all")
        matched = build_journalctl_argv(units, args, follow=True, cursor=cursor, lines="all")
        seen: dict[str, set[int]] = {"ours": set(), "matched": set()}
        followers = {
            name: subprocess.Popen(argv, stdout=subprocess.PIPE)
            for name, argv in (("ours", ours), ("matched", matched))
        }

        def read(name: str) -> None:
            stream = followers[name].stdout
            assert stream is not None
            for line in stream:
                if found := re.search(rb" seq=(\d+)", line):
                    seen[name].add(int(found.group(1)))

        readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in followers]
        for reader in readers:
            reader.start()
        try:
            written = 0
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < 6.0:
                due = int(10_000 * elapsed) - written
                if due > 0:
                    stamp = to_realtime_us(datetime.now(UTC))  # one time per batch, as journald
                    journal_writer.write_and_flush(
                        [
                            service_line(units[(written + k) % 8], f"{(written + k) % 8 + 1:032x}",
                                         100 + (written + k) % 8, f"INFO x seq={written + k}", stamp)
                            for k in range(due)
                        ]
                    )  # fmt: skip
                    written += due
                time.sleep(0.01)
            deadline = time.monotonic() + 60
            while len(seen["ours"]) < written and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            for follower in followers.values():
                follower.kill()
                follower.wait(10)
                if follower.stdout is not None:
                    follower.stdout.close()
        missing = sorted(set(range(written)) - seen["ours"])
        assert missing == [], f"{len(missing)} of {written} entries not followed: {missing[:20]}"
        skipped = written - len(seen["matched"])
        print(
            f"\n{written} entries at 10,000/s: all followed; with --unit matches {skipped} skipped"
        )


class TestSeveralMachinesInOneJournal:
    """A journal-remote directory holds several machines: same-named units stay apart."""

    def test_replay_keys_units_by_host(
        self, tmp_path: Path, journal_remote: str, journalctl: str
    ) -> None:
        from vllm_sentinel.replay import replay

        directory = tmp_path / "remote"
        directory.mkdir()
        unit = "vllm-ok.service"
        ok_id, stuck_id = "a" * 32, "b" * 32
        ready = [
            unit_started(unit, ok_id, T0_US, "vLLM", hostname="gpu-7"),
            service_line(
                unit,
                ok_id,
                10,
                "(APIServer pid=10) INFO 11-28 23:36:22 [loader.py:1] Loading weights took 3.0 s",
                T0_US + 1_000_000,
                hostname="gpu-7",
            ),
            service_line(
                unit,
                ok_id,
                10,
                "(APIServer pid=10) INFO:     Application startup complete.",
                T0_US + 2_000_000,
                hostname="gpu-7",
            ),
        ]
        stuck = [
            unit_started(unit, stuck_id, T0_US + 500_000, "vLLM", hostname="gpu-8"),
            service_line(
                unit,
                stuck_id,
                20,
                "(APIServer pid=20) INFO 11-28 23:36:22 [loader.py:1] Starting to load model x",
                T0_US + 1_500_000,
                hostname="gpu-8",
            ),
        ]
        for name, entries in (("gpu-7", ready), ("gpu-8", stuck)):
            with JournalWriter(directory, name, binary=journal_remote, journalctl=journalctl) as w:
                w.write(entries)
        out = subprocess.run(
            [journalctl, f"--directory={directory}", "-o", "json", "-a", "--no-pager"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        result = replay([[out]])
        by_host = {(u.host, u.unit): u for u in result.units}
        assert sorted(by_host) == [("gpu-7", unit), ("gpu-8", unit)]
        for snapshot in by_host.values():
            assert len(snapshot.incarnations) == 1
            assert snapshot.incarnations[-1].crash is None
            assert sum(snapshot.crashes_total.values()) == 0
        assert by_host[("gpu-7", unit)].incarnations[-1].id == ok_id
        assert by_host[("gpu-8", unit)].incarnations[-1].id == stuck_id
        assert by_host[("gpu-7", unit)].incarnations[-1].phase.value == "ready"
        assert by_host[("gpu-8", unit)].incarnations[-1].phase.value != "ready"
