"""``vllm-sentinel watch`` on real journal files (systemd-journal-remote, the real journalctl)
and over the real OpenSSH sshd: the command as a user runs it, in a child process.

The journal holds a unit's crashed incarnation A (CUDA out of memory while loading) and its
restart B, loading; the watch is started, then B's later lines are appended while it runs.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import orjson
import pytest

from tests.support.journal_writer import (
    MESSAGE_ID_STOPPED,
    MESSAGE_ID_STOPPING,
    JournalWriter,
    manager_line,
    other_unit_line,
    service_line,
    to_realtime_us,
    unit_failed,
    unit_started,
)
from tests.support.ssh_server import OpenSshServer
from vllm_sentinel.engine.snapshot import Snapshot
from vllm_sentinel.watch import WatchEvent

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "vllm_sentinel", "watch"]
UNIT = "vllm-kimi.service"
MODEL = "moonshotai/Kimi-K2.5"
A = "a1" * 16
B = "b2" * 16
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free."
)
WAIT_SECONDS = 120.0  # a deadline on events, not a limit on the command's speed


def _line(invocation: str, started: datetime, seconds: float, text: str, pid: int) -> dict:
    when = started + timedelta(seconds=seconds)
    stamp = when.strftime("%m-%d %H:%M:%S")
    return service_line(
        UNIT, invocation, pid, f"INFO {stamp} [x.py:1] {text}", to_realtime_us(when)
    )


def _raw(invocation: str, started: datetime, seconds: float, text: str, pid: int) -> dict:
    when = to_realtime_us(started + timedelta(seconds=seconds))
    return service_line(UNIT, invocation, pid, text, when, priority=3)


def _start(invocation: str, started: datetime, pid: int) -> list[dict]:
    """systemd's Started, vLLM 0.11's engine line and the start of weight loading."""
    return [
        unit_started(UNIT, invocation, to_realtime_us(started)),
        _line(
            invocation,
            started,
            5,
            f"Initializing a V1 LLM engine (v0.11.0) with config: model='{MODEL}'",
            pid,
        ),
        _line(invocation, started, 8, f"Starting to load model {MODEL}...", pid),
    ]


def _crash(invocation: str, started: datetime, pid: int) -> list[dict]:
    """An uncaught CUDA OOM while loading, then systemd's verdict."""
    return [
        _raw(invocation, started, 20, "Traceback (most recent call last):", pid),
        _raw(invocation, started, 20, '  File "/opt/vllm/worker.py", line 1, in load_model', pid),
        _raw(invocation, started, 20, OOM, pid),
        *unit_failed(UNIT, invocation, to_realtime_us(started + timedelta(seconds=21))),
    ]


def _stop(invocation: str, started: datetime, seconds: float) -> list[dict]:
    """systemd stops the unit cleanly (``systemctl stop``)."""
    when = to_realtime_us(started + timedelta(seconds=seconds))
    return [
        manager_line(UNIT, invocation, f"Stopping {UNIT} - vLLM...", MESSAGE_ID_STOPPING, when),
        manager_line(UNIT, invocation, f"{UNIT}: Deactivated successfully.", None, when),
        manager_line(UNIT, invocation, f"Stopped {UNIT} - vLLM.", MESSAGE_ID_STOPPED, when + 1),
    ]


def _ready(invocation: str, started: datetime, pid: int) -> list[dict]:
    """The rest of a healthy start, to the API server's startup complete."""
    when = started + timedelta(seconds=40)
    return [
        _line(invocation, started, 30, "Dynamo bytecode transform time: 6.12 s", pid),
        _line(invocation, started, 33, "Available KV cache memory: 20.5 GiB", pid),
        _line(invocation, started, 36, "Starting vLLM API server 0 on http://0.0.0.0:8000", pid),
        service_line(
            UNIT, invocation, pid, "INFO:     Application startup complete.", to_realtime_us(when)
        ),
    ]


class Watch:
    """``vllm-sentinel watch`` in a child process; its stdout lines read as they come."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[bytes] = []
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,))
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.put(line)

    def next_event(self, kind: str) -> dict:
        """The next NDJSON event of ``kind`` (the others are kept in ``seen``)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.process.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no {kind} event; seen {self.seen}")
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self.seen.append(line)
            event = orjson.loads(line)
            if event["event"] == kind:
                return event

    def finish(self) -> tuple[int, list[bytes], str]:
        """Wait for the exit; return its status, every stdout line and stderr."""
        status = self.process.wait(WAIT_SECONDS)
        self._reader.join(10)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        assert self.process.stderr is not None
        return status, self.seen, self.process.stderr.read().decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def watching(args: Sequence[str]) -> Iterator[Watch]:
    watch = Watch(args)
    try:
        yield watch
    finally:
        watch.kill()


def _args(journal: JournalWriter, tmp_path: Path, *extra: str) -> list[str]:
    return [
        UNIT,
        f"--directory={journal.path.parent}",
        f"--state-directory={tmp_path / 'state'}",
        *extra,
    ]


class TestWatchOnJournalFiles:
    """The local journal read from files with --directory, as a journal-remote host's."""

    def test_restarted_unit_followed_to_ready_with_the_previous_crash(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """A crashed (CUDA OOM), B loading: the watch names A's cause and hint, follows B, and
        exits 0 once B's ready lines are appended while it runs; the NDJSON events arrive as
        the lines do."""
        a_started = datetime.now(UTC) - timedelta(minutes=3)
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [
                other_unit_line(to_realtime_us(a_started) - 1_000_000),
                *_start(A, a_started, 4100),
                *_crash(A, a_started, 4100),
                *_start(B, b_started, 4200),
            ]
        )
        with watching(_args(journal_writer, tmp_path, "--json")) as watch:
            following = watch.next_event("following")
            previous = watch.next_event("previous_crash")
            phase = watch.next_event("phase")
            assert (following["invocation_id"], following["model"]) == (B, MODEL)
            assert following["vllm_version"] == "0.11.0"
            assert (previous["invocation_id"], previous["cause"]) == (A, "cuda_oom")
            assert previous["phase"] == "loading_weights"
            assert previous["exception"] == "torch.OutOfMemoryError"
            assert previous["hint"] and previous["runbook"].endswith("runbook.md#cuda_oom")
            assert Path(previous["runbook"].partition("#")[0]).is_file()  # one a user can open
            assert (phase["phase"], phase["invocation_id"]) == ("loading_weights", B)
            # appended while the watch runs: the events come before the exit
            journal_writer.write_and_flush(_ready(B, b_started, 4200)[:1])
            compiling = watch.next_event("phase")
            assert compiling["phase"] == "compiling"
            assert watch.process.poll() is None  # not ready yet: still watching
            journal_writer.write_and_flush(_ready(B, b_started, 4200)[1:])
            ready = watch.next_event("ready")
            status, lines, stderr = watch.finish()
        assert status == 0, stderr
        assert (ready["invocation_id"], ready["phase"]) == (B, "ready")
        assert ready["startup_seconds"] == pytest.approx(40.0)
        events = [orjson.loads(line) for line in lines]
        assert all(event["unit"] == UNIT for event in events)
        phases = [event["phase"] for event in events if event["event"] == "phase"]
        assert phases == [
            "loading_weights",
            "compiling",
            "profiling_kv_cache",
            "starting_api_server",
            "ready",
        ]
        # A's lines are not counted for B: no crash of the followed incarnation
        assert [event["event"] for event in events].count("crashed") == 0
        assert stderr == ""

    def test_the_host_is_the_journals_own(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """--directory holds another machine's journal: the events name that machine, the
        ``_HOSTNAME`` of the unit's records, not the machine the watch runs on (a new user's
        trial read its own laptop's name on a GPU node's journal)."""
        started = datetime.now(UTC) - timedelta(seconds=30)
        entries = [*_start(B, started, 4200), *_ready(B, started, 4200)]
        for entry in entries:
            entry["_HOSTNAME"] = "gpu-node-7"
        journal_writer.write_readable(entries)
        with watching(_args(journal_writer, tmp_path, "--json")) as watch:
            status, lines, stderr = watch.finish()
        assert status == 0, stderr
        events = [orjson.loads(line) for line in lines]
        assert {event["host"] for event in events} == {"gpu-node-7"}
        assert events[-1]["event"] == "ready"

    def test_the_directorys_name_when_the_unit_has_no_records_yet(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """No record of the unit names its machine yet: the directory's name stands for it
        (never this machine's)."""
        journal_writer.write_readable([other_unit_line(to_realtime_us(datetime.now(UTC)))])
        with watching(_args(journal_writer, tmp_path, "--json", "--timeout=2s")) as watch:
            status, lines, stderr = watch.finish()
        assert status == 4, stderr
        events = [orjson.loads(line) for line in lines]
        assert events and {event["host"] for event in events} == {journal_writer.path.parent.name}

    def test_crash_of_the_followed_incarnation_exits_1_with_its_cause(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """B crashes while followed: exit 1, its cause and hint on stderr, one line each; piped
        without --json, one plain line per event on stdout."""
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
        )
        with watching(_args(journal_writer, tmp_path)) as watch:
            deadline = time.monotonic() + WAIT_SECONDS
            while not any(b"phase loading_weights" in line for line in watch.seen):
                assert time.monotonic() < deadline, watch.seen
                with contextlib.suppress(queue.Empty):
                    watch.seen.append(watch.lines.get(timeout=1.0))
            journal_writer.write_and_flush(_crash(B, b_started, 4200))
            status, lines, stderr = watch.finish()
        assert status == 1, stderr
        first, second = stderr.splitlines()
        assert first.startswith(f"vllm-sentinel: {UNIT} crashed during loading_weights: ")
        assert "cause cuda_oom (torch.OutOfMemoryError: CUDA out of memory." in first
        assert second.startswith("vllm-sentinel: hint: ") and "#cuda_oom)" in second
        text = b"".join(lines).decode()
        assert f"{UNIT}: following incarnation {B[:12]}" in text
        assert (
            f"{UNIT}: incarnation {B[:12]} crashed during loading_weights: cause cuda_oom" in text
        )

    def test_eta_from_the_daemons_startup_history(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """The daemon's state directory holds an earlier start of the unit (60 s of loading,
        then 40 s to ready): B's progress event carries an ETA on that basis. The history is
        the journal's host's (its records' ``_HOSTNAME``, as the watch names it), not this
        machine's: the files in --directory are another machine's journal."""
        from vllm_sentinel.state.history_store import encode_name

        host = "llm-test"  # the journal writer's _HOSTNAME
        earlier = datetime.now(UTC) - timedelta(days=1)
        folder = tmp_path / "state" / "history" / encode_name(host)
        folder.mkdir(parents=True)
        phases = {"starting": 5.0, "initializing": 3.0, "loading_weights": 60.0}
        phases |= {"compiling": 20.0, "profiling_kv_cache": 10.0, "starting_api_server": 10.0}
        start = {
            "started_at": earlier.isoformat(),
            "ready_at": (earlier + timedelta(seconds=108)).isoformat(),
            "phase_seconds": phases,
            "invocation_id": "c3" * 16,
            "model": MODEL,
            "vllm_version": "0.11.0",
        }
        document = {"format": 1, "host": host, "unit": UNIT, "starts": [start]}
        (folder / f"{encode_name(UNIT)}.json").write_bytes(orjson.dumps(document))
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
        )
        with watching(_args(journal_writer, tmp_path, "--json")) as watch:
            progress = watch.next_event("progress")
        assert progress["phase"] == "loading_weights"
        eta = progress["eta"]
        assert eta["basis"] == "history"
        # 60 s of loading usually, 22 s of it done; then 40 s: about 78 s to go
        assert 60 < eta["seconds"] < 90
        assert eta["text"].endswith(", from earlier starts")

    def test_stall_exits_3(self, journal_writer: JournalWriter, tmp_path: Path) -> None:
        """B has been loading without a line for 20 minutes (the daemon's threshold is 10):
        stalled, exit 3, one line on stderr saying where."""
        b_started = datetime.now(UTC) - timedelta(minutes=20)
        journal_writer.write_readable(
            [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
        )
        with watching(_args(journal_writer, tmp_path, "--json")) as watch:
            status, lines, stderr = watch.finish()
        assert status == 3
        assert stderr.startswith(f"vllm-sentinel: {UNIT} stalled in loading_weights: ")
        assert stderr.count("\n") == 1
        assert orjson.loads(lines[-1])["event"] == "stalled"

    def test_timeout_exits_4(self, journal_writer: JournalWriter, tmp_path: Path) -> None:
        """B never gets ready: --timeout 2s ends the watch with status 4 and says where B is."""
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
        )
        with watching(_args(journal_writer, tmp_path, "--timeout=2s", "--json")) as watch:
            status, lines, stderr = watch.finish()
        assert status == 4
        assert stderr == (
            f"vllm-sentinel: timed out after 2s: {UNIT}: loading_weights (incarnation {B[:12]})\n"
        )
        assert orjson.loads(lines[-1])["event"] == "timed_out"

    def test_until_settled_on_a_unit_already_stopped_cleanly_exits_0(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """B stopped cleanly before the watch started: --until settled ("ready, or stopped
        cleanly") is reached at once, exit 0 (it waited for a next start until the timeout)."""
        b_started = datetime.now(UTC) - timedelta(minutes=5)
        journal_writer.write_readable(
            [
                other_unit_line(to_realtime_us(b_started) - 1),
                *_start(B, b_started, 4200),
                *_ready(B, b_started, 4200),
                *_stop(B, b_started, 120),
            ]
        )
        args = _args(journal_writer, tmp_path, "--until=settled", "--timeout=60s", "--json")
        with watching(args) as watch:
            status, lines, stderr = watch.finish()
        assert (status, stderr) == (0, "")
        events = [orjson.loads(line) for line in lines]
        stopped = [event for event in events if event["event"] == "stopped"]
        assert [(event["invocation_id"], event["outcome"]) for event in stopped] == [(B, "stopped")]
        assert not [event for event in events if event["event"] == "timed_out"]

    def test_a_crash_before_the_watch_with_no_new_start_says_so_at_the_timeout(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """B crashed before the watch started and nothing restarts it: the watch waits for a
        next start (a restart may be on its way) and at the timeout (exit 4) says the last start
        crashed, with its cause, not "no start seen"."""
        b_started = datetime.now(UTC) - timedelta(minutes=5)
        journal_writer.write_readable(
            [
                other_unit_line(to_realtime_us(b_started) - 1),
                *_start(B, b_started, 4200),
                *_crash(B, b_started, 4200),
            ]
        )
        with watching(_args(journal_writer, tmp_path, "--timeout=3s", "--json")) as watch:
            status, lines, stderr = watch.finish()
        assert status == 4
        state = f"last start {B[:12]} crashed during loading_weights: cause cuda_oom, no new start"
        assert stderr == f"vllm-sentinel: timed out after 3s: {UNIT}: {state}\n"
        last = orjson.loads(lines[-1])
        assert (last["event"], last["state"]) == ("timed_out", state)

    def test_ctrl_c_stops_it_with_130(self, journal_writer: JournalWriter, tmp_path: Path) -> None:
        """SIGINT while following: it stops at once, exit 130, nothing on stderr."""
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
        )
        with watching(_args(journal_writer, tmp_path, "--json")) as watch:
            watch.next_event("phase")
            watch.process.send_signal(signal.SIGINT)
            status, _, stderr = watch.finish()
        assert (status, stderr) == (130, "")

    def test_unreadable_journal_is_exit_2(self, tmp_path: Path) -> None:
        """A --directory journalctl cannot open: one line on stderr, exit 2."""
        with watching([UNIT, f"--directory={tmp_path / 'absent'}", "--timeout=30s"]) as watch:
            status, lines, stderr = watch.finish()
        assert status == 2
        assert lines == []
        assert stderr.startswith("vllm-sentinel: cannot read the journal of ")
        assert "absent" in stderr and stderr.count("\n") == 1

    def test_a_journal_without_entries_is_exit_2(self, tmp_path: Path) -> None:
        """An empty --directory: one line saying journalctl finds no entries, exit 2."""
        empty = tmp_path / "empty"
        empty.mkdir()
        with watching([UNIT, f"--directory={empty}", "--timeout=30s"]) as watch:
            status, lines, stderr = watch.finish()
        assert (status, lines) == (2, [])
        assert stderr.startswith("vllm-sentinel: cannot read the journal of ")
        assert "journalctl finds no entries" in stderr and stderr.count("\n") == 1


class TestWatchOverSsh:
    """--host through the real OpenSSH sshd, the daemon's transport and host-key check."""

    def test_host_followed_to_ready(
        self, journal_writer: JournalWriter, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """Over SSH: the previous crash's cause, then B followed to ready (exit 0)."""
        a_started = datetime.now(UTC) - timedelta(minutes=3)
        b_started = datetime.now(UTC) - timedelta(seconds=30)
        journal_writer.write_readable(
            [
                other_unit_line(to_realtime_us(a_started) - 1_000_000),
                *_start(A, a_started, 4100),
                *_crash(A, a_started, 4100),
                *_start(B, b_started, 4200),
                *_ready(B, b_started, 4200),
            ]
        )
        args = [
            UNIT,
            f"--host=root@127.0.0.1:{openssh_server.port}",
            f"--known-hosts={openssh_server.known_hosts_path}",
            f"--identity={openssh_server.client_key_path}",
            f"--directory={journal_writer.path.parent}",
            f"--state-directory={tmp_path / 'state'}",
            "--json",
        ]
        with watching(args) as watch:
            status, lines, stderr = watch.finish()
        assert status == 0, stderr
        events = [orjson.loads(line) for line in lines]
        assert {event["host"] for event in events} == {"127.0.0.1"}
        (previous,) = [event for event in events if event["event"] == "previous_crash"]
        assert (previous["invocation_id"], previous["cause"]) == (A, "cuda_oom")
        assert events[-1]["event"] == "ready" and events[-1]["invocation_id"] == B

    def test_unknown_host_key_is_exit_2(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """A host key that is not in --known-hosts: one line naming it, exit 2."""
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        args = [
            UNIT,
            f"--host=root@127.0.0.1:{openssh_server.port}",
            f"--known-hosts={empty}",
            f"--identity={openssh_server.client_key_path}",
        ]
        with watching(args) as watch:
            status, _, stderr = watch.finish()
        assert status == 2
        assert stderr.startswith("vllm-sentinel: cannot read the journal of 127.0.0.1: ")
        assert "not in" in stderr and stderr.count("\n") == 1


class _Recorder:
    """A ``WatchOutput`` keeping the events; once GPU growth is seen, B's ready lines are
    appended to the journal (so the watch ends with status 0)."""

    def __init__(self, journal: JournalWriter, started: datetime) -> None:
        self.seen: list[WatchEvent] = []
        self._journal = journal
        self._started = started
        self._readied = False

    def events(self, events: Sequence[WatchEvent], snapshot: Snapshot) -> None:
        self.seen.extend(events)
        grown = any(
            event.event == "progress" and event.fields.get("gpu_memory_growth_bytes", 0) > 0
            for event in events
        )
        if grown and not self._readied:
            self._readied = True
            self._journal.write_and_flush(_ready(B, self._started, 4200))

    def close(self) -> None:
        return None


@pytest.mark.asyncio
async def test_gpu_memory_per_gpu_and_its_growth(journal_writer: JournalWriter) -> None:
    """NVML (scripted: the one fake allowed) shows B's process on GPU 0 at 10, then 20 GiB:
    progress events carry the memory per GPU and the growth since B was followed."""
    from tests.support.fake_nvml import GIB, FakeGpu, FakeNvml
    from vllm_sentinel.sources.gpu import NvmlReader
    from vllm_sentinel.sources.transport import LocalTransport
    from vllm_sentinel.watch import WatchTarget, parse_until, run_watch

    b_started = datetime.now(UTC) - timedelta(seconds=30)
    journal_writer.write_readable(
        [other_unit_line(to_realtime_us(b_started) - 1), *_start(B, b_started, 4200)]
    )

    def gpu(used: int) -> tuple[FakeGpu, ...]:
        return (FakeGpu("GPU-0", "NVIDIA H200", 141 * GIB, used, ((4200, used),)),)

    # a reading every 2 s; the first ones may come before the journal named PID 4200's unit
    nvml = FakeNvml([gpu(10 * GIB), gpu(10 * GIB), gpu(10 * GIB), gpu(20 * GIB)])
    target = WatchTarget(
        "llm-two",
        LocalTransport("llm-two"),
        (f"--directory={journal_writer.path.parent}",),
        gpu=NvmlReader(nvml, host="llm-two"),
    )
    recorder: list[_Recorder] = []

    def output(_: object) -> _Recorder:
        recorder.append(_Recorder(journal_writer, b_started))
        return recorder[0]

    errors: list[str] = []
    status = await run_watch(
        target,
        [UNIT],
        parse_until("ready"),
        output,
        timeout_seconds=WAIT_SECONDS,
        err=errors.append,
    )
    assert (status, errors) == (0, [])
    progress = [event.fields for event in recorder[0].seen if event.event == "progress"]
    assert progress[0]["gpu_memory_bytes"] == {"0": 10 * GIB}
    assert progress[0]["gpu_memory_growth_bytes"] == 0
    grown = next(item for item in progress if item["gpu_memory_growth_bytes"])
    assert (grown["gpu_memory_bytes"], grown["gpu_memory_growth_bytes"]) == (
        {"0": 20 * GIB},
        10 * GIB,
    )


class TestWatchErrorsInWords:
    """Connection and file errors are the CLI's words (one line, exit 2), never a Python
    exception's name and repr."""

    def _run(self, *args: str, home: Path | None = None) -> tuple[int, str]:
        env = {**os.environ, "HOME": str(home)} if home is not None else None
        result = subprocess.run(
            [*CLI, UNIT, "--timeout=30s", *args],
            capture_output=True,
            timeout=WAIT_SECONDS,
            check=False,
            env=env,
        )
        assert result.stdout == b""
        return result.returncode, result.stderr.decode()

    def test_a_missing_known_hosts(self, tmp_path: Path) -> None:
        status, stderr = self._run("--host=127.0.0.1", home=tmp_path)
        path = tmp_path / ".ssh" / "known_hosts"
        assert (status, stderr) == (
            2,
            f"vllm-sentinel: watch: cannot read known_hosts {path}: no such file or directory "
            "(add the host's key there after checking its fingerprint, or name another file "
            "with --known-hosts)\n",
        )

    def test_a_missing_identity(self, tmp_path: Path) -> None:
        known = tmp_path / "known_hosts"
        known.write_text("")
        missing = tmp_path / "absent_key"
        status, stderr = self._run(
            "--host=127.0.0.1", f"--known-hosts={known}", f"--identity={missing}"
        )
        assert (status, stderr) == (
            2,
            f"vllm-sentinel: watch: cannot read identity {missing}: no such file or directory "
            "(name a private key with --identity)\n",
        )

    def test_identity_without_host_is_a_usage_error(self, tmp_path: Path) -> None:
        key = tmp_path / "key"
        key.write_text("")
        assert self._run(f"--identity={key}") == (
            2,
            "vllm-sentinel: watch: --identity needs --host (it is the key to log in to that "
            "host with)\n",
        )

    def test_connection_refused(self, tmp_path: Path) -> None:
        from tests.support.daemon import free_port

        known = tmp_path / "known_hosts"
        known.write_text("")
        port = free_port()  # nothing listens there
        status, stderr = self._run(f"--host=127.0.0.1:{port}", f"--known-hosts={known}")
        assert (status, stderr) == (
            2,
            "vllm-sentinel: cannot read the journal of 127.0.0.1: cannot connect: connection "
            "refused (nothing listens on that port: check --host's port, and that sshd runs)\n",
        )


@pytest.mark.parametrize(
    ("unit", "said"),
    [
        ("", "an empty UNIT: name the unit to follow (vllm-kimi, vllm@a.service)"),
        (
            "a b",
            "'a b' is not a valid systemd unit name: whitespace is not allowed (use letters, "
            "digits and ':-_.\\@')",
        ),
        ("vllm*", "'vllm*': name the units to follow (no globs)"),
    ],
    ids=["empty", "space", "glob"],
)
def test_a_unit_name_watch_refuses_is_said_as_typed(unit: str, said: str) -> None:
    """The name as the user typed it (not 'a b.service'), and no word of globs."""
    result = subprocess.run([*CLI, unit], capture_output=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == f"vllm-sentinel: watch: {said}\n"


class TestWatchTarget:
    """Which journal and which GPUs ``watch``'s options mean."""

    def test_a_directory_is_another_hosts_journal_so_no_local_gpu(self, tmp_path: Path) -> None:
        """--directory without --host: journal-remote files of another host; this machine's
        NVML would show the wrong GPUs (and its growth would count as progress)."""
        from vllm_sentinel.cli import watch_target

        target = watch_target(None, directory=str(tmp_path), state_directory=str(tmp_path))
        assert (target.gpu, target.journalctl_args) == (None, (f"--directory={tmp_path}",))
        assert target.history_directory == str(tmp_path / "history")

    def test_a_directory_is_named_by_its_journal_then_its_own_name(self, tmp_path: Path) -> None:
        """--directory without --host: the host is the journal's own (``run_watch`` reads its
        ``_HOSTNAME``), until then the directory's name, never this machine's."""
        from vllm_sentinel.cli import watch_target
        from vllm_sentinel.config import local_host_name

        journal = tmp_path / "gpu-node-7"
        journal.mkdir()
        target = watch_target(None, directory=f"{journal}/", state_directory=str(tmp_path))
        assert (target.host, target.host_from_journal) == ("gpu-node-7", True)
        odd = tmp_path / "a journal; $(x)"
        odd.mkdir()
        target = watch_target(None, directory=str(odd), state_directory=str(tmp_path))
        assert target.host == "a_journal____x_"  # a label: what is not one becomes _
        own = watch_target(None, state_directory=str(tmp_path))
        assert (own.host, own.host_from_journal) == (local_host_name(), False)

    def test_this_machines_journal_uses_its_nvml(self, tmp_path: Path) -> None:
        from vllm_sentinel.cli import watch_target

        target = watch_target(None, state_directory=str(tmp_path))
        assert (target.gpu, target.journalctl_args) == ("nvml", ())

    def test_a_host_uses_its_nvidia_smi(self, tmp_path: Path) -> None:
        from vllm_sentinel.cli import watch_target

        known = tmp_path / "known_hosts"
        known.write_text("")
        target = watch_target(
            "ops@gpu-7:2222", directory="/var/log/journal/remote", known_hosts=str(known)
        )
        assert (target.host, target.gpu) == ("gpu-7", "nvidia-smi")
        assert target.journalctl_args == ("--directory=/var/log/journal/remote",)
