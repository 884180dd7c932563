"""Fixtures for integration tests: real journal files, in-process SSH server, real sshd.

``built_package`` (and ``BuiltPackage``) live in ``tests/conftest.py``: the journald tier uses
the same wheelhouse, built once per session.

Every fixture resolves its binary through ``require_binary`` (skip locally, fail in CI) and
stops what it started in ``finally``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import BuiltPackage, require_binary
from tests.support.journal_writer import JOURNAL_REMOTE, JournalWriter
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


__all__ = ["BuiltPackage"]  # re-exported: tests import it from here
