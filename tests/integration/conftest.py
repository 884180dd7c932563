"""Fixtures for integration tests: real journal files, in-process SSH server, real sshd.

Every fixture resolves its binary through ``require_binary`` (skip locally, fail in CI) and
stops what it started in ``finally``.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import require_binary
from tests.support.journal_writer import JOURNAL_REMOTE, JournalWriter
from tests.support.packaging import tracked_tree, wheelhouse
from tests.support.ssh_server import OpenSshServer, SshTestServer


@pytest.fixture
def journalctl() -> str:
    """Absolute path of the real ``journalctl``."""
    return require_binary("journalctl")


@pytest.fixture
def journal_remote() -> str:
    """Absolute path of ``systemd-journal-remote``."""
    return require_binary(JOURNAL_REMOTE)


@pytest.fixture
def journal_writer(tmp_path: Path, journalctl: str, journal_remote: str) -> Iterator[JournalWriter]:
    """A live ``JournalWriter`` on ``tmp_path/journal/test.journal``, closed afterwards."""
    directory = tmp_path / "journal"
    directory.mkdir()
    writer = JournalWriter(directory, "test", binary=journal_remote, journalctl=journalctl)
    try:
        yield writer
    finally:
        writer.close()


@pytest_asyncio.fixture
async def ssh_server(tmp_path: Path) -> AsyncIterator[SshTestServer]:
    """An in-process asyncssh server on 127.0.0.1 running commands for real."""
    async with SshTestServer(tmp_path / "ssh") as server:
        yield server


@pytest.fixture
def openssh_server(tmp_path: Path) -> Iterator[OpenSshServer]:
    """A real OpenSSH sshd on a free 127.0.0.1 port with a throwaway config."""
    sshd = require_binary("/usr/sbin/sshd")
    server = OpenSshServer(tmp_path / "sshd", sshd=sshd)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class BuiltPackage:
    """A copy of the tracked tree, and a wheelhouse with its pure wheel and every dependency."""

    tree: Path
    wheelhouse: Path
    log: str

    @property
    def wheel(self) -> Path:
        (wheel,) = self.wheelhouse.glob("vllm_sentinel-*.whl")
        return wheel


@pytest.fixture(scope="session")
def built_package(tmp_path_factory: pytest.TempPathFactory) -> BuiltPackage:
    """The package built once per session with ``pip wheel -v`` (as a user's pip builds it)."""
    require_binary("git")
    base = tmp_path_factory.mktemp("package")
    tree = tracked_tree(base / "tree")
    wheels = base / "wheelhouse"
    try:
        log = wheelhouse(wheels, tree)
    except subprocess.CalledProcessError as error:
        output = (error.stdout or b"").decode(errors="replace")[-3000:]
        pytest.fail(f"pip wheel failed: {(error.stderr or b'').decode()[-3000:]}\n{output}")
    return BuiltPackage(tree, wheels, log)
