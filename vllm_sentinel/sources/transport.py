"""Run commands on a host, locally or over SSH, as bytes (edge: asyncio).

``Transport`` is the one interface the journal follower and the GPU poller use:

* ``stream(argv)`` is an async generator of stdout chunks (bytes, never decoded: journald
  output may hold any byte). Closing it (``aclose``, or leaving ``contextlib.aclosing``)
  terminates the child or closes the SSH channel — a remote ``journalctl -f`` exits on
  hang-up. It raises ``TransportError`` when the command cannot start or exits non-zero.
* ``run(argv, timeout)`` returns the whole stdout of a short command.
* ``connect()`` makes sure the host can be reached (opens the SSH connection, bounded by
  ``connect_timeout_seconds``), so that a caller can time what follows on its own;
* ``open_tcp(address, port)`` / ``open_unix(path)`` open a byte stream to a port or Unix
  socket *on that host* (the readiness probe's ``GET /health``): locally a plain connection,
  over SSH a ``direct-tcpip`` (``direct-streamlocal``) channel of the host's one connection —
  no extra network path, no port opened anywhere. A refused connection raises
  ``TransportError`` with reason ``connection_refused``; an SSH server that does not allow
  forwarding (``AllowTcpForwarding no``) ``forwarding_refused``. Timeouts are the caller's.

``argv`` is a list of arguments. Locally it is executed without a shell; over SSH the remote
command line is built with ``shlex.join``, so every argument is quoted for the remote POSIX
shell and nothing from config or logs is interpreted by it.

``SshTransport`` keeps one asyncssh connection per host, shared by all channels, verifies the
host key against ``known_hosts`` (an unknown or changed key raises ``HostKeyError`` naming the
host), and bounds every wait on the peer:

* connection setup (TCP connect, SSH handshake, authentication) and opening a channel each
  take at most ``connect_timeout_seconds``;
* ``run`` takes at most its ``timeout`` in all — connecting and opening the channel included
  (after a timeout the channel is closed without waiting for a dead peer to confirm);
* keepalives are sent after ``keepalive_interval_seconds`` without traffic, and a peer that
  answers none of ``keepalive_count_max`` of them is dropped: a dead peer is noticed within
  ``keepalive_interval_seconds × (keepalive_count_max + 1)`` of the last byte it sent (asyncssh
  gives up on the first timer after ``count_max`` unanswered requests). The open channels then
  fail with ``ssh_connection_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os.path
import shlex
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncssh
import structlog

from vllm_sentinel.errors import HostKeyError, TransportError

__all__ = ["ByteStream", "LocalTransport", "SshSettings", "SshTransport", "Transport"]

_READ_SIZE = 1 << 16
_STDERR_TAIL = 2000
_CLOSE_WAIT_SECONDS = 5.0
_TERMINATE_GRACE_SECONDS = 5.0
_log = structlog.get_logger("vllm_sentinel.sources.transport")
# asyncssh's own list with AES-GCM first: its ChaCha20-Poly1305 builds three cipher objects a
# packet in Python (~20 µs each way, measured), AES-GCM one (~3 µs); equally strong, and
# every OpenSSH since 6.2 offers it. The others stay for servers that do not.
_ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


class Transport(Protocol):
    """Runs commands on one host."""

    host: str

    def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        """Yield the command's stdout as it comes; closing the iterator stops the command."""
        ...

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:  # noqa: ASYNC109 (Transport API)
        """Run a short command and return its stdout; ``TransportError`` on failure."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def connect(self) -> None:
        """Make sure the host can be reached (over SSH: the connection is up); else raise."""
        ...

    async def open_tcp(self, address: str, port: int) -> ByteStream:
        """Open a TCP connection to ``address:port`` as seen from the host."""
        ...

    async def open_unix(self, path: str) -> ByteStream:
        """Open a connection to the Unix socket ``path`` on the host."""
        ...


async def _stderr_tail(stream: asyncio.StreamReader) -> bytes:
    """Read a child's stderr to its end, keeping only the last ``_STDERR_TAIL`` bytes."""
    tail = b""
    while chunk := await stream.read(_READ_SIZE):
        tail = (tail + chunk)[-_STDERR_TAIL:]
    return tail


def _tail(data: bytes) -> str:
    return data[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()


class LocalTransport:
    """Commands on this machine, as child processes (no shell)."""

    def __init__(self, host: str = "localhost") -> None:
        self.host = host

    async def _spawn(self, argv: Sequence[str]) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as error:
            raise TransportError(self.host, "spawn_failed", f"{argv[0]}: {error}") from error

    async def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        process = await self._spawn(argv)
        assert process.stdout is not None
        assert process.stderr is not None
        stderr_task = asyncio.ensure_future(_stderr_tail(process.stderr))
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
                await _terminate(process, stderr_read=True)
            if not stderr_task.done():
                stderr_task.cancel()
                await asyncio.gather(stderr_task, return_exceptions=True)

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:  # noqa: ASYNC109 (Transport API)
        process = await self._spawn(argv)
        try:
            async with asyncio.timeout(timeout):
                stdout, stderr = await process.communicate()
        except TimeoutError as error:
            raise TransportError(self.host, "timeout", f"{argv[0]} after {timeout:g}s") from error
        finally:
            if process.returncode is None:  # timed out, or cancelled: do not leave it behind
                await _terminate(process)
        if process.returncode != 0:
            raise TransportError(
                self.host, "command_failed", f"{argv[0]} exit {process.returncode}: {_tail(stderr)}"
            )
        return stdout

    async def close(self) -> None:
        return None

    async def connect(self) -> None:
        return None

    async def open_tcp(self, address: str, port: int) -> ByteStream:
        try:
            reader, writer = await asyncio.open_connection(address, port)
        except ConnectionRefusedError as error:
            raise TransportError(self.host, "connection_refused", _describe(error)) from error
        except OSError as error:
            raise TransportError(self.host, "connect_failed", _describe(error)) from error
        return ByteStream(reader.read, writer)

    async def open_unix(self, path: str) -> ByteStream:
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except (ConnectionRefusedError, FileNotFoundError) as error:
            raise TransportError(self.host, "connection_refused", _describe(error)) from error
        except OSError as error:
            raise TransportError(self.host, "connect_failed", _describe(error)) from error
        return ByteStream(reader.read, writer)


async def _wait_at_most(awaitable: Awaitable[object], seconds: float) -> bool:
    """Await ``awaitable`` for at most ``seconds``; False when the time ran out.

    ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11, ``wait_for`` swallows a
    cancellation that arrives as the awaited call completes, and a follower that misses its
    cancellation keeps running after its host was removed or the daemon stopped.
    """
    try:
        async with asyncio.timeout(seconds):
            await awaitable
    except TimeoutError:
        return False
    return True


async def _terminate(process: asyncio.subprocess.Process, *, stderr_read: bool = False) -> None:
    """SIGTERM, then SIGKILL after 5 s; never waits more than 10 s in all.

    Its output is read and dropped meanwhile: asyncio (3.11) finishes a child only once its
    pipes reached their end, and a reader that stopped consuming (a follower cancelled while
    ``journalctl`` was writing fast) leaves a full buffer, reading paused, and the child's
    transport open after its exit: collected after the event loop closed, it fails there.
    ``stderr_read``: the caller reads stderr itself (only one reader at a time).
    """
    pipes = (process.stdout,) if stderr_read else (process.stdout, process.stderr)
    drains = [asyncio.ensure_future(_drain(pipe)) for pipe in pipes if pipe is not None]
    try:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        if not await _wait_at_most(process.wait(), _TERMINATE_GRACE_SECONDS):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await _wait_at_most(process.wait(), _TERMINATE_GRACE_SECONDS)
    finally:
        for drain in drains:
            drain.cancel()
        await asyncio.gather(*drains, return_exceptions=True)


async def _drain(pipe: asyncio.StreamReader) -> None:
    """Read ``pipe`` to its end, dropping what it holds."""
    while await pipe.read(_READ_SIZE):
        pass


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
                "encryption_algs": _ENCRYPTION_ALGS,
                "port": settings.port,
                "known_hosts": known_hosts,
                # bounded below with asyncio.timeout: asyncssh bounds it with asyncio.wait_for,
                # which on Python 3.11 swallows a cancellation landing as the handshake
                # completes (a stopped follower then went on following)
                "connect_timeout": None,
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
                async with asyncio.timeout(settings.connect_timeout_seconds):
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
            except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as error:
                # a client key that cannot be read or decrypted (wrong or missing passphrase);
                # asyncssh's text names the problem, never the passphrase
                detail = f"client key unusable: {error}"
                raise TransportError(self.host, "ssh_auth_failed", detail) from error
            except (OSError, asyncssh.Error, TimeoutError) as error:
                raise TransportError(self.host, "ssh_connect_failed", _describe(error)) from error
            self._connection = connection
            return connection

    async def _open(
        self, connection: asyncssh.SSHClientConnection, argv: Sequence[str]
    ) -> asyncssh.SSHClientProcess[bytes]:
        """Open a channel running ``argv`` (quoted for the remote shell), within the timeout."""
        limit = self._settings.connect_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                return await connection.create_process(shlex.join(argv), encoding=None)
        except TimeoutError as error:
            raise TransportError(
                self.host, "ssh_channel_failed", f"no channel within {limit:g}s"
            ) from error
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_channel_failed", _describe(error)) from error

    async def stream(self, argv: Sequence[str]) -> AsyncGenerator[bytes, None]:
        connection = await self._connect()
        process = await self._open(connection, argv)
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
                await _wait_at_most(asyncio.shield(stderr_task), 2.0)
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
                with contextlib.suppress(OSError, asyncssh.Error):
                    await _wait_at_most(process.wait_closed(), _CLOSE_WAIT_SECONDS)
            stderr_task.cancel()
            await asyncio.gather(stderr_task, return_exceptions=True)

    async def run(self, argv: Sequence[str], timeout: float) -> bytes:  # noqa: ASYNC109 (Transport API)
        # One deadline for everything: a host that stops answering must not hold a GPU poll
        # in the connect or channel-open step longer than the poll's own timeout.
        process: asyncssh.SSHClientProcess[bytes] | None = None
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                connection = await self._connect()
                process = await self._open(connection, argv)
                stdout, stderr = await process.communicate()
        except TimeoutError as error:
            timed_out = True
            raise TransportError(self.host, "timeout", f"{argv[0]} after {timeout:g}s") from error
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_connection_lost", _describe(error)) from error
        finally:
            # On timeout or cancellation the remote command is still running: closing the
            # channel makes sshd hang it up and frees the session (OpenSSH MaxSessions=10).
            # After a timeout the peer may be dead and never confirm: do not wait for it.
            if process is not None:
                process.close()
                if not timed_out:
                    with contextlib.suppress(OSError, asyncssh.Error):
                        await _wait_at_most(process.wait_closed(), _CLOSE_WAIT_SECONDS)
        assert process is not None
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

    async def connect(self) -> None:
        await self._connect()

    async def open_tcp(self, address: str, port: int) -> ByteStream:
        connection = await self._connect()
        try:
            reader, writer = await connection.open_connection(address, port)
        except asyncssh.ChannelOpenError as error:
            raise TransportError(self.host, _open_refusal(error), _describe(error)) from error
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_connection_lost", _describe(error)) from error
        return ByteStream(reader.read, writer)

    async def open_unix(self, path: str) -> ByteStream:
        connection = await self._connect()
        try:
            reader, writer = await connection.open_unix_connection(path)
        except asyncssh.ChannelOpenError as error:
            raise TransportError(self.host, _open_refusal(error), _describe(error)) from error
        except (OSError, asyncssh.Error) as error:
            raise TransportError(self.host, "ssh_connection_lost", _describe(error)) from error
        return ByteStream(reader.read, writer)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
            with contextlib.suppress(OSError, asyncssh.Error):
                await _wait_at_most(connection.wait_closed(), _CLOSE_WAIT_SECONDS)


async def _drain_tail(process: asyncssh.SSHClientProcess[bytes], tail: bytearray) -> None:
    """Read the process's stderr to EOF, keeping only the last ``_STDERR_TAIL`` bytes."""
    with contextlib.suppress(OSError, asyncssh.Error):
        while chunk := await process.stderr.read(_READ_SIZE):
            tail += chunk
            del tail[:-_STDERR_TAIL]


def _expand(path: str) -> str:
    return os.path.expanduser(path)


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    text = str(reason or error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


def _open_refusal(error: asyncssh.ChannelOpenError) -> str:
    """The reason of a refused forwarding channel: policy, or nothing listening there."""
    if error.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
        return "forwarding_refused"
    return "connection_refused"


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    async def wait_closed(self) -> None: ...


class ByteStream:
    """A connection opened by ``Transport.open_tcp``/``open_unix``: bytes in, bytes out.

    Wraps an asyncio stream pair or an asyncssh channel's; errors of either (``OSError``,
    ``asyncssh.Error``) surface as ``ConnectionResetError``.
    """

    def __init__(self, read: Callable[[int], Awaitable[bytes]], writer: _Writer) -> None:
        self._read = read
        self._writer = writer

    async def read(self, size: int = _READ_SIZE) -> bytes:
        """Up to ``size`` bytes; ``b""`` at the end of the stream."""
        try:
            return await self._read(size)
        except (OSError, asyncssh.Error) as error:
            raise ConnectionResetError(_describe(error)) from error

    async def write(self, data: bytes) -> None:
        """Send ``data`` and wait until it may be sent again (flow control)."""
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (OSError, asyncssh.Error) as error:
            raise ConnectionResetError(_describe(error)) from error

    async def aclose(self) -> None:
        """Close the connection (waits at most 5 s for the peer)."""
        with contextlib.suppress(OSError, asyncssh.Error):
            self._writer.close()
            await _wait_at_most(self._writer.wait_closed(), _CLOSE_WAIT_SECONDS)
