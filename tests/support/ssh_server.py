"""SSH servers on 127.0.0.1 for tests: an in-process asyncssh server and a real OpenSSH sshd.

``SshTestServer`` (``async with``) runs the requested command for real, as a local child, and
relays its stdout/stderr bytes and exit status (``encoding=None``: bytes end to end). A
long-running command such as ``journalctl -f`` is relayed until the client closes the channel,
then the child is killed and reaped. Failure injection:

* ``drop_all_connections()`` aborts every connection without an SSH disconnect (TCP reset),
  as a crashed host or a cut network would;
* ``path_prepend`` puts directories in front of ``PATH`` for commands (stub ``nvidia-smi``);
* ``present_unknown_host_key=True`` makes the server present a host key that is *not* the one
  written to ``known_hosts_path`` (a changed or spoofed host);
* ``shell=True`` runs commands through ``/bin/sh -c`` as sshd does, instead of the default
  ``shlex.split`` + exec.

``SshServerThread`` runs an ``SshTestServer`` on its own event loop in a thread, for callers
without one of their own (the chaos test, the fleet benchmark).

``OpenSshServer`` starts ``/usr/sbin/sshd -D -e -f CONFIG`` with a throwaway config and keys
(``/work/shared/TOOLCHAIN.md`` §SSH on loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import asyncssh

from tests.support.daemon import free_port
from vllm_sentinel.sources.transport import SshSettings

__all__ = [
    "OpenSshServer",
    "RelayedChild",
    "SshServerThread",
    "SshTestServer",
    "generate_keys",
]

_READ_SIZE = 1 << 16
_KILL_GRACE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class _Keys:
    host_key: asyncssh.SSHKey
    client_key_path: Path
    authorized_keys_path: Path


def generate_keys(directory: Path) -> _Keys:
    """Make an ed25519 host key and client key pair under ``directory`` (mode 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519", comment="test-host")
    client_key = asyncssh.generate_private_key("ssh-ed25519", comment="test-client")
    client_key_path = directory / "client_ed25519"
    client_key.write_private_key(str(client_key_path))
    client_key_path.chmod(0o600)
    client_key.write_public_key(str(client_key_path) + ".pub")
    authorized = directory / "authorized_keys"
    client_key.write_public_key(str(authorized))
    return _Keys(host_key, client_key_path, authorized)


def _known_hosts_line(port: int, key: asyncssh.SSHKey) -> str:
    public = key.export_public_key("openssh").decode("ascii").split()
    return f"[127.0.0.1]:{port} {public[0]} {public[1]}\n"


def _settings(
    port: int, client_key: Path, known_hosts: Path, overrides: dict[str, object]
) -> SshSettings:
    values: dict[str, object] = {
        "address": "127.0.0.1",
        "port": port,
        "client_keys": (str(client_key),),
        "known_hosts": str(known_hosts),
        "connect_timeout_seconds": 10.0,
        "keepalive_interval_seconds": 5.0,
    }
    values.update(overrides)
    return SshSettings(**values)  # type: ignore[arg-type]


@dataclass(slots=True)
class RelayedChild:
    """A command the in-process server ran for a client."""

    command: str
    argv: list[str]
    pid: int
    returncode: int | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)


class SshTestServer:
    """In-process asyncssh server on 127.0.0.1 that runs commands for real.

    Attributes (after ``__aenter__``):
        port: the listening port.
        known_hosts_path: ``[127.0.0.1]:PORT ssh-ed25519 …`` for the *trusted* host key.
        client_key_path: private key the server accepts.
        children: every command run so far, with pid and exit state.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        path_prepend: tuple[Path | str, ...] = (),
        present_unknown_host_key: bool = False,
        shell: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self._path_prepend = tuple(str(p) for p in path_prepend)
        self._present_unknown = present_unknown_host_key
        self._shell = shell
        self.port = 0
        self.known_hosts_path = self.directory / "known_hosts"
        self.client_key_path = self.directory / "client_ed25519"
        self.children: list[RelayedChild] = []
        self._child_started = asyncio.Condition()
        self._server: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    def settings(self, **overrides: object) -> SshSettings:
        """``SshSettings`` that reach this server with its client key and known_hosts."""
        return _settings(self.port, self.client_key_path, self.known_hosts_path, overrides)

    async def __aenter__(self) -> Self:
        keys = await asyncio.to_thread(generate_keys, self.directory)
        self.client_key_path = keys.client_key_path
        presented = (
            asyncssh.generate_private_key("ssh-ed25519", comment="impostor")
            if self._present_unknown
            else keys.host_key
        )
        server = self

        class _Server(asyncssh.SSHServer):
            def __init__(self) -> None:
                self._conn: asyncssh.SSHServerConnection | None = None

            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                self._conn = conn
                server._connections.add(conn)

            def connection_lost(self, exc: Exception | None) -> None:
                if self._conn is not None:
                    server._connections.discard(self._conn)

        self._server = await asyncssh.create_server(
            _Server,
            "127.0.0.1",
            0,
            server_host_keys=[presented],
            authorized_client_keys=str(keys.authorized_keys_path),
            process_factory=self._start_handler,
            encoding=None,
            allow_scp=False,
            agent_forwarding=False,
            x11_forwarding=False,
        )
        sockets = self._server.sockets
        self.port = sockets[0].getsockname()[1]
        self.known_hosts_path.write_text(_known_hosts_line(self.port, keys.host_key))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for conn in list(self._connections):
            conn.abort()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=_KILL_GRACE_SECONDS * 2)
        for task in self._handlers:
            task.cancel()

    @property
    def connection_count(self) -> int:
        """Client connections open right now."""
        return len(self._connections)

    def drop_all_connections(self) -> int:
        """Abort every connection with a TCP reset, no SSH disconnect; return how many."""
        dropped = 0
        for conn in list(self._connections):
            sock = conn.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.abort()
            dropped += 1
        self._connections.clear()
        return dropped

    async def wait_for_child(
        self, predicate: Callable[[RelayedChild], bool], timeout_seconds: float = 10.0
    ) -> RelayedChild:
        """Wait until a command matching ``predicate`` has been started; return it."""

        def find() -> RelayedChild | None:
            return next((child for child in self.children if predicate(child)), None)

        async with self._child_started:
            await asyncio.wait_for(self._child_started.wait_for(find), timeout_seconds)
        found = find()
        assert found is not None
        return found

    async def wait_children_exited(self, timeout_seconds: float = 10.0) -> None:
        """Wait until every child run so far has exited and been reaped."""
        pending = [child.exited.wait() for child in self.children if not child.exited.is_set()]
        if pending:
            await asyncio.wait_for(asyncio.gather(*pending), timeout_seconds)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self._path_prepend:
            env["PATH"] = os.pathsep.join([*self._path_prepend, env.get("PATH", "")])
        return env

    def _start_handler(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.get_running_loop().create_task(self._handle(process))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if not command:
            process.stderr.write(b"this test server only runs commands\n")
            process.exit(1)
            return
        argv = ["/bin/sh", "-c", command] if self._shell else shlex.split(command)
        try:
            child = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._environment(),
                start_new_session=True,
            )
        except OSError as error:
            process.stderr.write(f"{argv[0]}: {error.strerror}\n".encode())
            process.exit(127)
            return
        record = RelayedChild(command, argv, child.pid)
        async with self._child_started:
            self.children.append(record)
            self._child_started.notify_all()
        assert child.stdout is not None and child.stderr is not None
        relays = [
            asyncio.ensure_future(_relay(child.stdout, process.stdout)),
            asyncio.ensure_future(_relay(child.stderr, process.stderr)),
        ]
        hang_up = asyncio.ensure_future(process.channel.wait_closed())
        helpers: list[asyncio.Future[Any]] = [*relays, hang_up]
        try:
            output_done = asyncio.gather(*relays)
            helpers.append(output_done)
            first: set[asyncio.Future[Any]] = {output_done, hang_up}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if output_done.done():  # the command closed its output: report its status
                exit_wait = asyncio.ensure_future(child.wait())
                helpers.append(exit_wait)
                second: set[asyncio.Future[Any]] = {exit_wait, hang_up}
                await asyncio.wait(second, return_when=asyncio.FIRST_COMPLETED)
                if exit_wait.done() and not hang_up.done():
                    code = exit_wait.result()
                    process.exit(code if code >= 0 else 128 - code)
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await _stop(child)
            record.returncode = child.returncode
            record.exited.set()


async def _relay(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    while True:
        chunk = await source.read(_READ_SIZE)
        if not chunk:
            return
        try:
            sink.write(chunk)
            await sink.drain()
        except (BrokenPipeError, ConnectionError, asyncssh.Error):
            return


async def _drain(stream: asyncio.StreamReader | None) -> None:
    """Read a dead child's pipe to EOF so that asyncio closes its transport."""
    if stream is None:
        return
    with contextlib.suppress(TimeoutError, OSError):
        while await asyncio.wait_for(stream.read(_READ_SIZE), _KILL_GRACE_SECONDS):
            pass


async def _stop(child: asyncio.subprocess.Process) -> None:
    """Terminate the child's process group (SIGKILL after a grace period) and reap it.

    The pipes are drained meanwhile: asyncio's ``wait()`` also waits for them to close.
    """
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
    drains = asyncio.gather(_drain(child.stdout), _drain(child.stderr))
    try:
        await asyncio.wait_for(child.wait(), _KILL_GRACE_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        await child.wait()
    await drains


class OpenSshServer:
    """A real OpenSSH ``sshd`` on 127.0.0.1 with a throwaway config (context manager).

    ``extra_config`` lines are appended to the config (``AllowTcpForwarding no``).

    Attributes:
        port, known_hosts_path, client_key_path, config_path, log (stderr lines so far).
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        sshd: str = "/usr/sbin/sshd",
        extra_config: tuple[str, ...] = (),
    ) -> None:
        self.directory = Path(directory)
        self._sshd = sshd
        self._extra_config = extra_config
        self.port = 0
        self.known_hosts_path = self.directory / "known_hosts"
        self.client_key_path = self.directory / "client_ed25519"
        self.config_path = self.directory / "sshd_config"
        self.log: list[str] = []
        self._listening = threading.Event()
        self._is_listening = False
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def settings(self, **overrides: object) -> SshSettings:
        """``SshSettings`` that reach this sshd with its client key and known_hosts."""
        return _settings(self.port, self.client_key_path, self.known_hosts_path, overrides)

    def start(self, timeout: float = 10.0) -> None:
        """Write keys and config, start sshd, wait until it logs that it listens."""
        keys = generate_keys(self.directory)
        self.client_key_path = keys.client_key_path
        host_key_path = self.directory / "ssh_host_ed25519_key"
        keys.host_key.write_private_key(str(host_key_path))
        host_key_path.chmod(0o600)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        self.port = free_port()
        self.known_hosts_path.write_text(_known_hosts_line(self.port, keys.host_key))
        self.config_path.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key_path}",
                    f"PidFile {self.directory / 'sshd.pid'}",
                    f"AuthorizedKeysFile {keys.authorized_keys_path}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    "LogLevel VERBOSE",
                    *self._extra_config,
                    "",
                ]
            )
        )
        self._process = subprocess.Popen(
            [self._sshd, "-D", "-e", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        self._listening.wait(timeout)
        if not self._is_listening:
            self.stop()
            raise RuntimeError(f"sshd did not listen within {timeout}s: {self.log[-20:]}")

    def _read_log(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for raw in self._process.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip()
            self.log.append(line)
            if f"Server listening on 127.0.0.1 port {self.port}" in line:
                self._is_listening = True
                self._listening.set()
        self._listening.set()  # sshd exited: wake the waiter, which checks the process

    def stop(self) -> None:
        """SIGTERM sshd and wait for it (SIGKILL after 10 s)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(10)
        if process.stderr is not None:
            process.stderr.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class SshServerThread:
    """``SshTestServer`` (real SSH on 127.0.0.1, running commands for real) on its own event
    loop in a daemon thread; ``close`` stops it.

    Raises (from the constructor): what the server raised while starting, or
    ``RuntimeError`` when it did not start within 60 s.
    """

    def __init__(self, directory: Path, *, path_prepend: tuple[Path, ...] = ()) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.server: SshTestServer | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(directory, path_prepend), daemon=True
        )
        self._thread.start()
        self._ready.wait(60)
        if self.error is not None:
            raise self.error
        if self.server is None:
            raise RuntimeError("the SSH server did not start")

    def _run(self, directory: Path, path_prepend: tuple[Path, ...]) -> None:
        try:
            asyncio.run(self._serve(directory, path_prepend))
        except BaseException as error:  # reported to the caller
            self.error = error
            self._ready.set()

    async def _serve(self, directory: Path, path_prepend: tuple[Path, ...]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with SshTestServer(directory, path_prepend=path_prepend) as server:
            self.server = server
            self._ready.set()
            await self._stop.wait()

    def drop_all_connections(self) -> int:
        """Reset every SSH connection (no SSH disconnect); return how many."""
        assert self._loop is not None and self.server is not None
        server = self.server

        async def drop() -> int:
            return server.drop_all_connections()

        return asyncio.run_coroutine_threadsafe(drop(), self._loop).result(10)

    def close(self) -> None:
        """Stop the server and wait for its thread (at most 60 s)."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
