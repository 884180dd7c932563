"""``SshTransport`` against real SSH servers on loopback.

Most tests use the in-process asyncssh server of ``tests.support.ssh_server`` (commands run
for real, failures injected on purpose); ``TestOpenSsh`` runs against a real OpenSSH sshd.
``TestTransportRegressions`` pins transport bugs that were found here and fixed: a ``run``
timeout leaving the remote command running, a drop reported as a failed command, and a stderr
flood stalling stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import asyncssh
import pytest

from tests.support.journal_writer import JournalWriter, service_line, to_realtime_us
from tests.support.ssh_server import OpenSshServer, SshTestServer
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.errors import HostKeyError, TransportError
from vllm_sentinel.sources.transport import SshTransport

pytestmark = pytest.mark.integration

HOST = "gpu-node-7"
UNIT = "vllm-kimi-k25.service"
INVOCATION = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
T0_US = to_realtime_us(datetime(2026, 11, 28, 23, 37, 31, tzinfo=UTC))

# Arguments a shell would expand, split or execute if they were not quoted.
HOSTILE_ARGS = [
    "a b",
    "it's",
    '"double"',
    "$(touch /tmp/pwned-by-dollar)",
    "`touch /tmp/pwned-by-backtick`",
    "; echo injected",
    "&& echo and",
    "| cat",
    "$HOME",
    "*",
    "~",
    "back\\slash",
    "new\nline",
    "tab\there",
    "-n",
    "ünïcödé",
    "",
]


def _lines(count: int, start: int = 0) -> list[dict[str, str | bytes | int]]:
    return [
        service_line(UNIT, INVOCATION, 222500, f"line {i}", T0_US + i * 1000)
        for i in range(start, start + count)
    ]


def _stream(transport: SshTransport, argv: list[str]) -> AsyncGenerator[bytes, None]:
    """``transport.stream`` typed as the async generator it is (it has ``aclose``)."""
    return cast(AsyncGenerator[bytes, None], transport.stream(argv))


def _no_injected_files() -> bool:
    """None of HOSTILE_ARGS was executed by a shell."""
    return not any(Path(f"/tmp/pwned-by-{kind}").exists() for kind in ("dollar", "backtick"))


async def _read_into(stream: AsyncGenerator[bytes, None], chunks: list[bytes]) -> None:
    """Append every chunk of ``stream`` to ``chunks`` until it ends or raises; close it."""
    async with contextlib.aclosing(stream):
        async for chunk in stream:
            chunks.append(chunk)


def _journalctl_follow(journalctl: str, path: Path, *extra: str) -> list[str]:
    return [journalctl, f"--file={path}", "-o", "json", "-a", "-f", "-n", "all", *extra]


async def _collect_records(
    stream: AsyncIterator[bytes],
    decoder: JournalJsonDecoder,
    count: int,
    timeout_seconds: float = 10.0,
) -> list[Record]:
    """Decode records from ``stream`` until ``count`` arrived; fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    records: list[Record] = []
    while len(records) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"{len(records)} of {count} records before the deadline")
        chunk = await asyncio.wait_for(anext(stream), remaining)
        records += decoder.feed(chunk)
    return records


@contextlib.asynccontextmanager
async def _transport(
    server: SshTestServer | OpenSshServer, **overrides: object
) -> AsyncIterator[SshTransport]:
    transport = SshTransport(HOST, server.settings(**overrides))
    try:
        yield transport
    finally:
        await transport.close()


class TestCommands:
    """Short commands with ``run`` and ``stream``."""

    @pytest.mark.asyncio
    async def test_run_returns_stdout_bytes(self, ssh_server: SshTestServer) -> None:
        """run(["echo", "a b"]) returns exactly b"a b\\n"."""
        async with _transport(ssh_server) as transport:
            assert await transport.run(["echo", "a b"], timeout=10) == b"a b\n"

    @pytest.mark.asyncio
    @pytest.mark.parametrize("shell", [False, True], ids=["exec", "sh-c"])
    async def test_arguments_arrive_literally(self, tmp_path: Path, shell: bool) -> None:
        """Spaces, quotes, $(...), backticks, ; and globs reach the remote argv unchanged."""
        async with SshTestServer(tmp_path / "ssh", shell=shell) as server, _transport(server) as t:
            output = await t.run(["printf", "%s\\0", *HOSTILE_ARGS], timeout=10)
        assert output.split(b"\0")[:-1] == [arg.encode() for arg in HOSTILE_ARGS]
        assert _no_injected_files()

    @pytest.mark.asyncio
    async def test_invalid_utf8_is_byte_exact(
        self, ssh_server: SshTestServer, tmp_path: Path
    ) -> None:
        """Every byte value, invalid UTF-8 included, comes through run and stream unchanged."""
        payload = bytes(range(256)) * 1200 + b"\xff\xfe\xc3(\x80 end"
        blob = tmp_path / "blob.bin"
        blob.write_bytes(payload)
        async with _transport(ssh_server) as transport:
            assert await transport.run(["printf", "\\377\\376ok\\200\\n"], timeout=10) == (
                b"\xff\xfeok\x80\n"
            )
            assert await transport.run(["cat", str(blob)], timeout=10) == payload
            chunks = [chunk async for chunk in _stream(transport, ["cat", str(blob)])]
            assert b"".join(chunks) == payload
            # the connection survived the invalid bytes and is still usable
            assert await transport.run(["echo", "still up"], timeout=10) == b"still up\n"

    @pytest.mark.asyncio
    async def test_failing_command_raises_with_stderr(self, ssh_server: SshTestServer) -> None:
        """A non-zero exit raises TransportError(command_failed) carrying the stderr tail."""
        argv = ["sh", "-c", "echo partial; echo 'nvidia-smi: driver mismatch' >&2; exit 9"]
        async with _transport(ssh_server) as transport:
            with pytest.raises(TransportError) as run_error:
                await transport.run(argv, timeout=10)
            chunks: list[bytes] = []
            with pytest.raises(TransportError) as stream_error:
                await _read_into(_stream(transport, argv), chunks)
        assert b"".join(chunks) == b"partial\n"  # stdout came through before the error
        for error in (run_error.value, stream_error.value):
            assert error.host == HOST
            assert error.reason == "command_failed"
            assert "exit 9" in error.detail
            assert "driver mismatch" in error.detail

    @pytest.mark.asyncio
    async def test_missing_command_raises(self, ssh_server: SshTestServer) -> None:
        """A command the remote cannot find raises TransportError (exit 127)."""
        async with _transport(ssh_server) as transport:
            with pytest.raises(TransportError, match="exit 127"):
                await transport.run(["no-such-command-xyz"], timeout=10)

    @pytest.mark.asyncio
    async def test_path_prepend_serves_a_stub(self, tmp_path: Path) -> None:
        """A stub nvidia-smi placed first on the server's PATH answers the query."""
        stub_dir = tmp_path / "bin"
        stub_dir.mkdir()
        stub = stub_dir / "nvidia-smi"
        stub.write_text("#!/bin/sh\nprintf '0, 81559, 73422\\n1, 81559, 120\\n'\n")
        stub.chmod(0o755)
        argv = [
            "nvidia-smi",
            "--query-gpu=index,memory.total,memory.used",
            "--format=csv,noheader,nounits",
        ]
        server = SshTestServer(tmp_path / "ssh", path_prepend=(stub_dir,))
        async with server, _transport(server) as transport:
            assert await transport.run(argv, timeout=10) == b"0, 81559, 73422\n1, 81559, 120\n"

    @pytest.mark.asyncio
    async def test_one_connection_is_shared(self, ssh_server: SshTestServer) -> None:
        """Several commands, concurrent ones included, use a single SSH connection."""
        async with _transport(ssh_server) as transport:
            results = await asyncio.gather(
                *(transport.run(["echo", str(i)], timeout=10) for i in range(8))
            )
            assert results == [f"{i}\n".encode() for i in range(8)]
            assert ssh_server.connection_count == 1


class TestFollowJournal:
    """A remote journalctl -f streamed over SSH."""

    @pytest.mark.asyncio
    async def test_stream_follows_and_close_stops_remote_child(
        self, ssh_server: SshTestServer, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """Backfill and live entries arrive; closing the stream ends the remote journalctl."""
        journal_writer.write_and_flush(_lines(3))
        journal_writer.wait_until_readable(3)
        decoder = JournalJsonDecoder(HOST)
        async with _transport(ssh_server) as transport:
            stream = _stream(transport, _journalctl_follow(journalctl, journal_writer.path))
            async with contextlib.aclosing(stream):
                backfill = await _collect_records(stream, decoder, 3)
                journal_writer.write_and_flush(_lines(2, start=3))
                live = await _collect_records(stream, decoder, 2)
                child = await ssh_server.wait_for_child(lambda c: c.argv[0] == journalctl)
                assert child.returncode is None  # still following
            await asyncio.wait_for(child.exited.wait(), 10)
            assert child.returncode is not None
            with pytest.raises(ProcessLookupError):
                os.kill(child.pid, 0)
            assert [r.message for r in backfill + live] == [f"line {i}" for i in range(5)]
            assert {r.host for r in backfill + live} == {HOST}
            # the shared connection outlives the closed channel
            assert await transport.run(["echo", "ok"], timeout=10) == b"ok\n"

    @pytest.mark.asyncio
    async def test_dropped_connection_raises_then_resume_from_cursor(
        self, ssh_server: SshTestServer, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """A reset connection makes the stream raise; a new stream --after-cursor misses nothing."""
        journal_writer.write_and_flush(_lines(4))
        journal_writer.wait_until_readable(4)
        decoder = JournalJsonDecoder(HOST)
        async with _transport(ssh_server) as transport:
            stream = _stream(transport, _journalctl_follow(journalctl, journal_writer.path))
            async with contextlib.aclosing(stream):
                seen = await _collect_records(stream, decoder, 4)
                assert ssh_server.drop_all_connections() == 1
                with pytest.raises(TransportError) as lost:
                    await _collect_records(stream, decoder, 1)
            assert lost.value.reason == "ssh_connection_lost"
            assert lost.value.host == HOST
            await ssh_server.wait_children_exited()

            journal_writer.write_and_flush(_lines(3, start=4))  # written while "down"
            journal_writer.wait_until_readable(7)
            cursor = decoder.last_cursor
            assert cursor == seen[-1].cursor
            argv = _journalctl_follow(journalctl, journal_writer.path, f"--after-cursor={cursor}")
            resumed_decoder = JournalJsonDecoder(HOST)
            async with contextlib.aclosing(_stream(transport, argv)) as resumed:
                rest = await _collect_records(resumed, resumed_decoder, 3)
        assert [r.message for r in seen + rest] == [f"line {i}" for i in range(7)]


class TestHostKeys:
    """Host key verification against known_hosts."""

    @pytest.mark.asyncio
    async def test_unknown_host_key_is_refused(self, tmp_path: Path) -> None:
        """A server presenting a key not in known_hosts raises HostKeyError naming the host."""
        async with SshTestServer(tmp_path / "ssh", present_unknown_host_key=True) as server:
            async with _transport(server) as transport:
                with pytest.raises(HostKeyError) as error:
                    await transport.run(["echo", "never"], timeout=10)
            assert server.children == []  # nothing ran
        assert error.value.host == HOST
        assert error.value.reason == "host_key_not_verifiable"
        assert str(error.value).startswith(f"{HOST}: ")
        assert str(server.known_hosts_path) in str(error.value)

    @pytest.mark.asyncio
    async def test_stream_refuses_unknown_host_key_too(self, tmp_path: Path) -> None:
        """stream() verifies the host key before running anything."""
        async with SshTestServer(tmp_path / "ssh", present_unknown_host_key=True) as server:
            async with _transport(server) as transport:
                with pytest.raises(HostKeyError):
                    async with contextlib.aclosing(_stream(transport, ["echo"])) as stream:
                        await anext(stream)
            assert server.children == []


class TestTransportRegressions:
    """Bugs found in vllm_sentinel/sources/transport.py and fixed: timeouts, drops, stderr floods."""

    @pytest.mark.asyncio
    async def test_run_timeout_stops_remote_command(self, ssh_server: SshTestServer) -> None:
        """After run() times out, the remote command is gone."""
        async with _transport(ssh_server) as transport:
            with pytest.raises(TransportError, match="timeout"):
                await transport.run(["sleep", "60"], timeout=0.5)
            await ssh_server.wait_children_exited(timeout_seconds=3)

    @pytest.mark.asyncio
    async def test_run_on_dropped_connection_says_connection_lost(
        self, ssh_server: SshTestServer
    ) -> None:
        """A connection reset during run() raises TransportError(ssh_connection_lost)."""
        async with _transport(ssh_server) as transport:
            running = asyncio.ensure_future(transport.run(["sleep", "60"], timeout=10))
            await ssh_server.wait_for_child(lambda c: c.argv == ["sleep", "60"])
            ssh_server.drop_all_connections()
            with pytest.raises(TransportError) as error:
                await running
        assert error.value.reason == "ssh_connection_lost"

    @pytest.mark.asyncio
    async def test_stream_survives_heavy_stderr(self, ssh_server: SshTestServer) -> None:
        """A command writing 8 MB to stderr still delivers its stdout and ends."""
        argv = ["sh", "-c", "head -c 8000000 /dev/zero >&2; echo done"]
        async with _transport(ssh_server) as transport:
            chunks: list[bytes] = []
            await asyncio.wait_for(_read_into(_stream(transport, argv), chunks), 3)
        assert b"".join(chunks) == b"done\n"

    @pytest.mark.asyncio
    async def test_a_cancellation_landing_as_the_connection_completes_is_not_lost(
        self, ssh_server: SshTestServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The caller is cancelled just as the SSH handshake completes: it stops.

        Regression (chaos seed 155, CI): ``asyncssh.connect`` bounds the handshake with
        ``asyncio.wait_for``, which on Python 3.11 returns the connection and swallows a
        cancellation landing as it completes; a follower stopped by a reload then went on
        following for good (``host_stop_timed_out`` after 10 s).
        """
        import asyncssh.connection as connection_module

        target: list[asyncio.Task[bytes]] = []
        connect = connection_module._connect

        async def cancelled_on_return(*args: object, **kwargs: object) -> object:
            connection = await connect(*args, **kwargs)  # type: ignore[arg-type]
            if target and not target[0].done():
                target[0].cancel()  # the stop request arrives as the handshake completes
            return connection

        monkeypatch.setattr(connection_module, "_connect", cancelled_on_return)
        async with _transport(ssh_server) as transport:
            target.append(asyncio.ensure_future(transport.run(["true"], timeout=10)))
            done, _ = await asyncio.wait(target, timeout=5)
            assert done, "run() lost its cancellation"
            assert target[0].cancelled(), "run() went on after its cancellation"


class TestOpenSsh:
    """The same transport against a real OpenSSH sshd (commands run via the login shell)."""

    @pytest.mark.asyncio
    async def test_run_and_literal_arguments(self, openssh_server: OpenSshServer) -> None:
        """A command runs; hostile arguments survive the remote shell unchanged."""
        async with _transport(openssh_server) as transport:
            assert await transport.run(["echo", "a b"], timeout=20) == b"a b\n"
            output = await transport.run(["printf", "%s\\0", *HOSTILE_ARGS], timeout=20)
            assert output.split(b"\0")[:-1] == [arg.encode() for arg in HOSTILE_ARGS]
            assert await transport.run(["printf", "\\377\\376\\n"], timeout=20) == b"\xff\xfe\n"
        assert _no_injected_files()

    @pytest.mark.asyncio
    async def test_stream_journal_and_close(
        self, openssh_server: OpenSshServer, journal_writer: JournalWriter, journalctl: str
    ) -> None:
        """A remote journalctl -f streams backfill and live lines; closing leaves no process."""
        journal_writer.write_and_flush(_lines(3))
        journal_writer.wait_until_readable(3)
        argv = _journalctl_follow(journalctl, journal_writer.path)
        decoder = JournalJsonDecoder(HOST)
        async with _transport(openssh_server) as transport:
            async with contextlib.aclosing(_stream(transport, argv)) as stream:
                records = await _collect_records(stream, decoder, 3, timeout_seconds=20)
                journal_writer.write_and_flush(_lines(2, start=3))
                records += await _collect_records(stream, decoder, 2, timeout_seconds=20)
                assert _followers(journal_writer.path)  # the remote journalctl is running
            await _wait_no_followers(journal_writer.path, timeout_seconds=10)
        assert [r.message for r in records] == [f"line {i}" for i in range(5)]

    @pytest.mark.asyncio
    async def test_wrong_host_key_is_refused(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """A known_hosts entry with another key for [127.0.0.1]:PORT makes the client refuse."""
        impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        wrong = tmp_path / "wrong_known_hosts"
        wrong.write_text(f"[127.0.0.1]:{openssh_server.port} {impostor}")
        async with _transport(openssh_server, known_hosts=str(wrong)) as transport:
            with pytest.raises(HostKeyError) as error:
                await transport.run(["echo"], timeout=20)
        assert error.value.host == HOST
        assert error.value.reason == "host_key_not_verifiable"


def _followers(path: Path) -> list[int]:
    """PIDs of processes whose command line mentions ``path`` (the remote journalctl)."""
    needle = f"--file={path}".encode()
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = Path(entry.path, "cmdline").read_bytes()
            if needle in cmdline.split(b"\0"):
                found.append(int(entry.name))
    return found


async def _wait_no_followers(path: Path, timeout_seconds: float) -> None:
    """Poll /proc (every 20 ms, with a deadline) until no process follows ``path``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    while pids := _followers(path):
        if loop.time() >= deadline:
            raise TimeoutError(f"journalctl still running after close: {pids}")
        await asyncio.sleep(0.02)  # poll interval, bounded by the deadline


def test_a_local_stream_closed_while_its_child_writes_fast_leaves_nothing_behind() -> None:
    """``LocalTransport.stream`` closed while its child still writes fast (a busy ``journalctl``
    whose follower is cancelled): the child is reaped and its transport finished before the
    event loop closes. Found by the chaos test: the output nobody read any more paused the
    pipe, asyncio never saw its end, and the transport failed when collected after the loop
    had closed (``Exception ignored in BaseSubprocessTransport.__del__``)."""
    import gc
    import sys

    from vllm_sentinel.sources.transport import LocalTransport

    unraisable: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append

    async def main() -> float:
        stream = LocalTransport("here").stream(["yes", "y" * 1000])
        await anext(stream)
        await asyncio.sleep(0.3)  # the child fills the pipe and the reader's buffer
        started = time.monotonic()
        await stream.aclose()
        return time.monotonic() - started

    try:
        closed_in = asyncio.run(main())
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert unraisable == []
    assert closed_in < 5.0  # reaped at SIGTERM, not after the kill's grace
