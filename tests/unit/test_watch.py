"""``watch``'s judge and outputs, fed by the daemon's own Monitor (records in, snapshots out)."""

from __future__ import annotations

import io
from datetime import datetime, timedelta

import orjson
import pytest

from tests.support.records import T0, Journal
from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.monitor import HostPlan, Monitor, Tick
from vllm_sentinel.sources.journal import JournalBatch
from vllm_sentinel.watch import (
    EXIT_CRASHED,
    EXIT_REACHED,
    EXIT_STALLED,
    JsonOutput,
    LineOutput,
    LiveOutput,
    Until,
    WatchEvent,
    WatchJudge,
    parse_duration,
    parse_until,
    printable,
)

UNIT = "vllm-kimi-k25.service"
A = "a1" * 16
B = "b2" * 16


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class _Setup:
    """A Monitor of one host, a judge over it and a journal to feed it."""

    def __init__(self, until: str = "ready") -> None:
        self.clock = _Clock()
        self.monitor = Monitor([HostPlan("llm-two", (UNIT,))], clock=self.clock, settle_seconds=5)
        self.judge = WatchJudge("llm-two", (UNIT,), parse_until(until), monotonic=self._mono)
        self.journal = Journal(UNIT)
        self.mono = 0.0

    def _mono(self) -> float:
        return self.mono

    def feed(self, *records: object, backfill: bool = False) -> list[WatchEvent]:
        self.monitor.apply(JournalBatch("llm-two", tuple(records), None, backfill))  # type: ignore[arg-type]
        if backfill:
            self.monitor.apply(JournalBatch("llm-two", (), None, False))
        return self.judge.observe(self.monitor.publish())

    def tick(self, seconds: float) -> list[WatchEvent]:
        self.clock.now = T0 + timedelta(seconds=seconds)
        self.monitor.apply(Tick(self.clock.now))
        return self.judge.observe(self.monitor.publish())

    def start(self, invocation: str, at: float, pid: int) -> list[object]:
        j = self.journal
        return [
            j.at(at).systemd(f"Started {UNIT}.", invocation),
            j.at(at + 1).line(
                "INFO 11-28 23:35:01 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with "
                "config: model='m'",
                invocation,
                pid,
            ),
            j.at(at + 2).line(
                "INFO 11-28 23:35:02 [x.py:1] Starting to load model m...", invocation, pid
            ),
        ]

    def crash(self, invocation: str, at: float, pid: int) -> list[object]:
        j = self.journal
        return [
            j.at(at).line("Traceback (most recent call last):", invocation, pid),
            j.at(at).line('  File "/x/worker.py", line 1, in load', invocation, pid),
            j.at(at).line("torch.OutOfMemoryError: CUDA out of memory.", invocation, pid),
            j.at(at + 1).systemd(
                f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", invocation
            ),
            j.at(at + 1).systemd(f"{UNIT}: Failed with result 'exit-code'.", invocation),
        ]

    def ready(self, invocation: str, at: float, pid: int) -> list[object]:
        return [
            self.journal.at(at).line("INFO:     Application startup complete.", invocation, pid)
        ]


def _kinds(events: list[WatchEvent]) -> list[str]:
    return [event.event for event in events]


class TestWatchJudge:
    """Which incarnation is followed, what is said of it, and how the watch ends."""

    def test_previous_crash_then_ready(self) -> None:
        """A crashed, B starting: following B, A's cause and hint; B's ready ends with 0."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=60)
        events = s.feed(*s.start(A, 0, 10), *s.crash(A, 10, 10), *s.start(B, 50, 20), backfill=True)
        assert _kinds(events) == ["following", "previous_crash", "phase"]
        assert events[0].fields["invocation_id"] == B
        assert (events[1].fields["invocation_id"], events[1].fields["cause"]) == (A, "cuda_oom")
        assert events[1].fields["runbook"].endswith("#cuda_oom")
        assert events[2].fields["phase"] == "loading_weights"
        assert s.judge.verdict is None
        events = s.feed(*s.ready(B, 58, 20))
        assert _kinds(events) == ["phase", "ready"]
        assert s.judge.verdict is not None and s.judge.verdict.status == EXIT_REACHED

    def test_crash_of_the_followed_incarnation(self) -> None:
        """B crashes while followed: a crashed event, exit 1, cause and hint lines."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=5)
        s.feed(*s.start(B, 0, 20), backfill=True)
        events = s.feed(*s.crash(B, 8, 20))
        assert _kinds(events) == ["phase", "crashed"]
        verdict = s.judge.verdict
        assert verdict is not None and verdict.status == EXIT_CRASHED
        cause, hint = verdict.lines
        assert cause == (
            f"{UNIT} crashed during loading_weights: cause cuda_oom "
            "(torch.OutOfMemoryError: CUDA out of memory.)"
        )
        assert hint.startswith("hint: ") and hint.endswith("#cuda_oom)")

    def test_a_crash_and_the_restart_in_one_batch(self) -> None:
        """B crashes and systemd starts C before the watch looks again: B's crash ends it."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=5)
        s.feed(*s.start(B, 0, 20), backfill=True)
        events = s.feed(*s.crash(B, 8, 20), *s.start("c3" * 16, 12, 30))
        assert "crashed" in _kinds(events) and "following" not in _kinds(events)
        verdict = s.judge.verdict
        assert verdict is not None and verdict.status == EXIT_CRASHED
        assert verdict.lines[0].startswith(f"{UNIT} crashed during loading_weights: cause cuda_oom")

    def test_an_ended_incarnation_is_not_followed(self) -> None:
        """The newest incarnation crashed before the watch: said, then the next one is
        followed; the old one's crash is not the followed one's."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=30)
        events = s.feed(*s.start(A, 0, 10), *s.crash(A, 10, 10), backfill=True)
        assert _kinds(events) == ["previous_crash"]
        assert events[0].fields["waiting"] is True
        assert s.judge.verdict is None
        events = s.feed(*s.start(B, 40, 20))
        assert _kinds(events) == ["following", "phase"]  # A's crash was said already
        assert s.judge.verdict is None

    def test_stall_exits_3(self) -> None:
        """Loading with no line for past the daemon's threshold (600 s): stalled, exit 3."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=10)
        s.feed(*s.start(B, 0, 20), backfill=True)
        assert s.judge.verdict is None
        events = s.tick(2 + 601)
        assert _kinds(events) == ["stalled"]
        verdict = s.judge.verdict
        assert verdict is not None and verdict.status == EXIT_STALLED
        assert verdict.lines == (
            f"{UNIT} stalled in loading_weights: no progress for 10m01s "
            "(the daemon's stall threshold)",
        )

    def test_progress_at_most_every_three_seconds(self) -> None:
        """Shard progress is an event; a second one within 3 s (monotonic) waits, the next
        after it carries the newest figures."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=5)
        s.feed(*s.start(B, 0, 20), backfill=True)
        j = s.journal

        def shards(at: float, done: int) -> object:
            bar = (
                f"Loading safetensors checkpoint shards:  {done * 100 // 64}% Completed | {done}/64"
            )
            return j.at(at).line(f"{bar} [00:10<00:10,  1.00s/it]", B, 20)

        (first,) = s.feed(shards(6, 16))
        assert first.event == "progress"
        assert (first.fields["shards_loaded"], first.fields["shards_total"]) == (16, 64)
        s.mono = 1.0
        assert s.feed(shards(7, 32)) == []
        s.mono = 3.5
        (later,) = s.feed(shards(8, 48))
        assert later.fields["shards_loaded"] == 48

    def test_until_a_phase(self) -> None:
        """--until loading_weights is reached by a unit loading (or past it)."""
        s = _Setup("loading_weights")
        s.clock.now = T0 + timedelta(seconds=5)
        events = s.feed(*s.start(B, 0, 20), backfill=True)
        assert _kinds(events)[-1] == "reached"
        assert s.judge.verdict is not None and s.judge.verdict.status == EXIT_REACHED

    def test_a_clean_stop_waits_for_the_next_start(self) -> None:
        """systemctl restart: the followed one stops, the next is followed, no verdict yet."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=5)
        s.feed(*s.start(A, 0, 10), backfill=True)
        j = s.journal
        events = s.feed(
            j.at(6).systemd(f"Stopping {UNIT}...", A),
            j.at(7).systemd(f"Stopped {UNIT}.", A),
        )
        assert "stopped" in _kinds(events)
        assert s.judge.verdict is None
        events = s.feed(*s.start(B, 10, 20))
        assert _kinds(events)[:1] == ["following"]
        assert events[0].fields["invocation_id"] == B


def test_a_long_message_cut_in_the_verdict_ends_with_an_ellipsis() -> None:
    """The exit line names the crash's message to 300 characters: a longer one ends with
    ``…`` (a new user's trial read a cut message as if it were whole)."""
    s = _Setup()
    s.clock.now = T0 + timedelta(seconds=5)
    s.feed(*s.start(B, 0, 20), backfill=True)
    keys = ", ".join(f"'model.layers.{n}.mlp.experts.w13_weight'" for n in range(20))
    crash = s.crash(B, 8, 20)
    crash[2] = s.journal.at(8).line(f"KeyError: dict_keys([{keys}])", B, 20)
    s.feed(*crash)
    verdict = s.judge.verdict
    assert verdict is not None and verdict.status == EXIT_CRASHED
    cause = verdict.lines[0]
    assert cause.startswith(f"{UNIT} crashed during loading_weights: cause unknown (KeyError: ")
    message = cause.split("(KeyError: ", 1)[1].removesuffix(")")
    assert message.endswith("…") and len(message) == 300, message
    assert message[:-1] == f"dict_keys([{keys}])"[:299]


class TestOutputs:
    """NDJSON, plain lines and the live block."""

    def _events(self) -> tuple[_Setup, list[WatchEvent]]:
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=60)
        events = s.feed(*s.start(A, 0, 10), *s.crash(A, 10, 10), *s.start(B, 50, 20), backfill=True)
        return s, events

    def test_ndjson_one_object_per_line(self) -> None:
        """Each event is one parseable JSON object with event, at, host and unit."""
        s, events = self._events()
        stream = io.StringIO()
        JsonOutput(stream).events(events, s.monitor.latest)
        parsed = [orjson.loads(line) for line in stream.getvalue().splitlines()]
        assert [item["event"] for item in parsed] == ["following", "previous_crash", "phase"]
        assert parsed[0]["at"] == "2026-11-28T23:36:00Z"
        assert {item["host"] for item in parsed} == {"llm-two"}

    def test_plain_lines(self) -> None:
        """One line per event: time, host, unit, words."""
        s, events = self._events()
        stream = io.StringIO()
        LineOutput(stream).events(events, s.monitor.latest)
        lines = stream.getvalue().splitlines()
        assert lines[0] == (
            f"23:36:00 llm-two {UNIT}: following incarnation {B[:12]} started "
            "2026-11-28T23:35:50Z (model m, vLLM 0.11.0)"
        )
        assert lines[1].startswith(
            f"23:36:00 llm-two {UNIT}: previous incarnation {A[:12]} crashed during "
            "loading_weights: cause cuda_oom (torch.OutOfMemoryError: CUDA out of memory.) — hint:"
        )
        assert lines[2] == f"23:36:00 llm-two {UNIT}: phase loading_weights"

    def test_live_block_redraws_in_place(self) -> None:
        """The second draw moves up over the first block's lines and clears them."""
        s, events = self._events()
        stream = io.StringIO()
        live = LiveOutput(stream, s.judge, 100)
        live.events(events, s.monitor.latest)
        first = stream.getvalue()
        drawn = first.count("\n")
        assert first.startswith("\x1b[J")
        assert f"{UNIT} on llm-two: incarnation {B[:12]} started 23:35:50 UTC, 10s ago" in first
        assert "  phase    loading_weights for 8s" in first
        assert "previous incarnation" in first and "cuda_oom" in first
        s.tick(70)
        live.events([], s.monitor.latest)
        assert stream.getvalue()[len(first) :].startswith(f"\x1b[{drawn}F\x1b[J")
        assert "loading_weights for 18s" in stream.getvalue()[len(first) :]

    def test_log_text_never_reaches_the_terminal_as_an_escape(self) -> None:
        """A crash message with escapes and newlines is drawn with them replaced."""
        s = _Setup()
        s.clock.now = T0 + timedelta(seconds=5)
        s.feed(*s.start(B, 0, 20), backfill=True)
        j = s.journal
        evil = "torch.OutOfMemoryError: CUDA out of memory \x1b]0;owned\x07\x1b[2J"
        events = s.feed(
            j.at(8).line("Traceback (most recent call last):", B, 20),
            j.at(8).line(evil, B, 20),
            j.at(9).systemd(f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", B),
        )
        stream = io.StringIO()
        LiveOutput(stream, s.judge, 200).events(events, s.monitor.latest)
        LineOutput(stream).events(events, s.monitor.latest)
        drawn = stream.getvalue()
        assert "\x07" not in drawn and "\x1b]" not in drawn and "\x1b[2J" not in drawn
        assert s.judge.verdict is not None
        assert all("\x1b" not in line for line in s.judge.verdict.lines)


class TestParsing:
    """--timeout and --until."""

    @pytest.mark.parametrize(
        ("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5m", 90)]
    )
    def test_durations(self, text: str, seconds: float) -> None:
        """Seconds, minutes and hours, alone or together."""
        assert parse_duration(text) == seconds

    @pytest.mark.parametrize("text", ["", "soon", "5 minutes", "0", "-5m"])
    def test_bad_durations(self, text: str) -> None:
        """Anything else is refused with the forms it takes."""
        with pytest.raises(ValueError, match=r"duration|more than 0"):
            parse_duration(text)

    def test_until(self) -> None:
        """ready, settled and the startup phases; other words are refused."""
        assert parse_until("ready") == Until("ready")
        assert parse_until("compiling") == Until("compiling", Phase.COMPILING)
        with pytest.raises(ValueError, match="is not one of: ready, settled, starting"):
            parse_until("crashed")

    def test_printable(self) -> None:
        """Control characters become ?."""
        assert printable("a\x1b[31mb\r\nc\x9b") == "a?[31mb??c?"


class _Journal:
    """A transport whose ``journalctl`` prints ``output`` (and records the argv)."""

    def __init__(self, output: bytes) -> None:
        self.output = output
        self.argv: list[str] = []

    async def run(self, argv: list[str], timeout: float) -> bytes:
        self.argv = list(argv)
        return self.output


@pytest.mark.parametrize(
    ("output", "host"),
    [
        (b'{"__CURSOR":"c","_HOSTNAME":"gpu-node-7"}\n', "gpu-node-7"),
        (b"", "journal-dir"),  # no record of the units yet: the directory's name
        (b'{"_HOSTNAME":"gpu 7; $(reboot)"}\n', "journal-dir"),  # not a host name: not used
        (b'{"_HOSTNAME":["gpu-7"]}\nnot json\n', "journal-dir"),
    ],
)
def test_journal_host_is_the_units_records_machine(output: bytes, host: str) -> None:
    """``journal_host``: the ``_HOSTNAME`` of the units' latest record in the files, when it
    is a host's name; else the target's own (the directory's) name."""
    import asyncio

    from vllm_sentinel.watch import WatchTarget, journal_host

    transport = _Journal(output)
    target = WatchTarget(
        "journal-dir",
        transport,  # type: ignore[arg-type]
        ("--directory=/srv/journal-dir",),
        host_from_journal=True,
    )
    assert asyncio.run(journal_host(target, (UNIT,))) == host
    assert "--directory=/srv/journal-dir" in transport.argv
    assert f"--unit={UNIT}" in transport.argv and "--lines=1" in transport.argv
