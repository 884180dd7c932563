"""Run commands on a host, locally or over SSH, as bytes (edge: asyncio).

``Transport`` is the one interface the journal follower and the GPU poller use:

* ``stream(argv)`` is an async generator of stdout chunks (bytes, never decoded: journald
  output may hold any byte). Closing it (``aclose``, or leaving ``contextlib.aclosing``)
  terminates the child or closes the SSH channel — a remote ``journalctl -f`` exits on
  hang-up. It raises ``TransportError`` when the command cannot start or exits non-zero.
* ``run(argv, timeout)`` returns the whole stdout of a short command.

``argv`` is a list of arguments. Locally it is executed without a shell; over SSH the remote
command line is built with ``shlex.join``, so every argument is quoted for the remote POSIX
shell and nothing from config or logs is interpreted by it.

``SshTransport`` keeps one asyncssh connection per host, shared by all channels, verifies the
host key against ``known_hosts`` (an unknown or changed key raises ``HostKeyError`` naming the
host), times out connection setup, and sends keepalives so a dead peer is noticed within
``keepalive_interval_seconds × keepalive_count_max``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncssh
import structlog

from vllm_sentinel.errors import HostKeyError, TransportError

__all__ = ["LocalTransport", "SshSettings", "SshTransport", "Transport"]

_READ_SIZE = 1 << 16
_STDERR_TAIL = 2000
_log = structlog.get_logger("vllm_sentinel.transport")


class Transport(Protocol):
    """Runs commands on one host."""

    host: str

    def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        """Yield the command's stdout as it comes; closing the iterator stops the command."""
        ...

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:
        """Run a short command and return its stdout; ``TransportError`` on failure."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def _tail(data: bytes) -> str:
    return data[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()


class LocalTransport:
    """Commands on this machine, as child processes (no shell)."""

    def __init__(self, host: str = "localhost") -> None:
        self.host = host

    async def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as error:
            raise TransportError(self.host, "spawn_failed", f"{argv[0]}: {error}") from error
        assert process.stdout is not None and process.stderr is not None
        stderr_task = asyncio.ensure_future(process.stderr.read())
        finished = False
        try:
            while True:
                chunk = await process.stdout.read(_READ_SIZE)
                if not chunk:
                    break
                yield chunk
            code = await process.wait()
            finished = True
            stderr = await stderr_task
            if code != 0:
                raise TransportError(self.host, "command_failed", f"exit {code}: {_tail(stderr)}")
        finally:
            if not finished:
                await _terminate(process)
            if not stderr_task.done():
                stderr_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await stderr_task

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as error:
            raise TransportError(self.host, "spawn_failed", f"{argv[0]}: {error}") from error
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError as error:
            await _terminate(process)
            raise TransportError(self.host, "timeout", f"{argv[0]} after {timeout:g}s") from error
        if process.returncode != 0:
            raise TransportError(
                self.host, "command_failed", f"{argv[0]} exit {process.returncode}: {_tail(stderr)}"
            )
        return stdout

    async def close(self) -> None:
        return None


async def _terminate(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 5.0)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How to reach a host over SSH.

    Attributes:
        address: host name or IP address.
        port: TCP port.
        user: login name (``None``: asyncssh's default, the local user).
        client_keys: private key files; empty uses the agent and default keys.
        known_hosts: known_hosts file the host key must be in.
        insecure_accept_any_host_key: accept any host key (labs only; logged loudly).
        connect_timeout_seconds: limit on TCP connect + SSH handshake + auth.
        keepalive_interval_seconds, keepalive_count_max: dead-peer detection.
        passphrase: for encrypted client keys (never logged).
    """

    address: str
    port: int = 22
    user: str | None = None
    client_keys: tuple[str, ...] = ()
    known_hosts: str | None = "~/.ssh/known_hosts"
    insecure_accept_any_host_key: bool = False
    connect_timeout_seconds: float = 10.0
    keepalive_interval_seconds: float = 15.0
    keepalive_count_max: int = 3
    passphrase: str | None = None

    def __repr__(self) -> str:
        return (
            f"SshSettings(address={self.address!r}, port={self.port}, user={self.user!r}, "
            f"known_hosts={self.known_hosts!r}, passphrase={'***' if self.passphrase else None})"
        )


class SshTransport:
    """Commands on a remote host over one shared asyncssh connection.

    The connection is opened on first use and again after it drops; a failure to connect
    raises ``TransportError`` (``HostKeyError`` for host keys) and the caller retries.
    """

    def __init__(self, host: str, settings: SshSettings) -> None:
        self.host = host
        self._settings = settings
        self._connection: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            connection = self._connection
            if connection is not None and not connection.is_closed():
                return connection
            settings = self._settings
            known_hosts: object
            if settings.insecure_accept_any_host_key:
                _log.warning(
                    "ssh_host_key_check_disabled",
                    host=self.host,
                    detail="insecure_accept_any_host_key is set: any server is trusted",
                )
                known_hosts = None
            else:
                known_hosts = _expand(settings.known_hosts) if settings.known_hosts else ()
            options: dict[str, object] = {
                "port": settings.port,
                "known_hosts": known_hosts,
                "connect_timeout": settings.connect_timeout_seconds,
                "keepalive_interval": settings.keepalive_interval_seconds,
                "keepalive_count_max": settings.keepalive_count_max,
            }
            if settings.user:
                options["username"] = settings.user
            if settings.client_keys:
                options["client_keys"] = [_expand(key) for key in settings.client_keys]
            if settings.passphrase:
                options["passphrase"] = settings.passphrase
            try:
                connection = await asyncssh.connect(settings.address, **options)
            except asyncssh.HostKeyNotVerifiable as error:
                raise HostKeyError(
                    self.host,
                    "host_key_not_verifiable",
                    f"{settings.address}:{settings.port} presented a host key that is not in "
                    f"{settings.known_hosts} (unknown or changed): {error.reason}",
                ) from error
            except asyncssh.PermissionDenied as error:
                raise TransportError(self.host, "ssh_auth_failed", str(error.reason)) from error
            except (OSError, asyncssh.Error, TimeoutError) as error:
                raise TransportError(self.host, "ssh_connect_failed", _describe(error)) from error
            self._connection = connection
            return connection

    async def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        connection = await self._connect()
        command = shlex.join(argv)
        try:
            process = await connection.create_process(command, encoding=None)
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_channel_failed", _describe(error)) from error
        # stderr shares the channel's flow-control window with stdout: leaving it unread
        # stalls stdout once ~2 MiB of stderr are buffered. Drain it, keep only the tail.
        stderr_tail = bytearray()
        stderr_task = asyncio.ensure_future(_drain_tail(process, stderr_tail))
        completed = False
        try:
            while True:
                try:
                    chunk = await process.stdout.read(_READ_SIZE)
                except (OSError, asyncssh.Error) as error:
                    raise TransportError(
                        self.host, "ssh_connection_lost", _describe(error)
                    ) from error
                if not chunk:
                    break
                yield chunk
            await process.wait_closed()
            completed = True
            status = process.exit_status
            if connection.is_closed() and status is None:
                raise TransportError(self.host, "ssh_connection_lost", "connection closed")
            if status not in (0, None):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stderr_task), 2.0)
                raise TransportError(
                    self.host, "command_failed", f"exit {status}: {_tail(bytes(stderr_tail))}"
                )
            if status is None:
                raise TransportError(
                    self.host, "ssh_connection_lost", "channel closed without status"
                )
        finally:
            if not completed:
                process.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.wait_closed(), 5.0)
            stderr_task.cancel()
            await asyncio.gather(stderr_task, return_exceptions=True)

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:
        connection = await self._connect()
        command = shlex.join(argv)
        try:
            process = await connection.create_process(command, encoding=None)
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_channel_failed", _describe(error)) from error
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError as error:
            raise TransportError(self.host, "timeout", f"{argv[0]} after {timeout:g}s") from error
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_connection_lost", _describe(error)) from error
        finally:
            # On timeout or cancellation the remote command is still running: closing the
            # channel makes sshd hang it up and frees the session (OpenSSH MaxSessions=10).
            process.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(process.wait_closed(), 5.0)
        status = process.exit_status
        if status is None:
            raise TransportError(
                self.host, "ssh_connection_lost", f"{argv[0]}: channel closed without exit status"
            )
        if status != 0:
            raise TransportError(
                self.host, "command_failed", f"{argv[0]} exit {status}: {_tail(stderr or b'')}"
            )
        return stdout if isinstance(stdout, bytes) else b""

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.wait_closed(), 5.0)


async def _drain_tail(process: asyncssh.SSHClientProcess[bytes], tail: bytearray) -> None:
    """Read the process's stderr to EOF, keeping only the last ``_STDERR_TAIL`` bytes."""
    with contextlib.suppress(OSError, asyncssh.Error):
        while chunk := await process.stderr.read(_READ_SIZE):
            tail += chunk
            del tail[:-_STDERR_TAIL]


def _expand(path: str) -> str:
    import os.path

    return os.path.expanduser(path)


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    text = str(reason or error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]
