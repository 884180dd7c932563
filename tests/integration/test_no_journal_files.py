"""A host whose journalctl finds no journal files at all (issue 21): its journal collector is
down with that reason, not ``journal up`` beside "no unit matches yet"; the real journalctl on
an empty ``--directory``, then on one where a file appears."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.journal_writer import JournalWriter, other_unit_line, to_realtime_us
from vllm_sentinel.sources.journal import FollowerSettings, JournalFollower
from vllm_sentinel.sources.transport import LocalTransport

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

WAIT_SECONDS = 60.0  # a deadline on the state change, not a speed limit


async def _until(follower: JournalFollower, reason: str, up: bool) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not (follower.state.up == up and follower.state.reason == reason):
        assert time.monotonic() < deadline, follower.state
        await asyncio.sleep(0.02)


async def test_no_journal_files_is_a_down_collector(
    tmp_path: Path, journalctl: str, journal_remote: str
) -> None:
    """An empty journal directory: down with ``no_journal_files``; once a file with an entry
    is there, up again (with no unit matching yet)."""
    directory = tmp_path / "journal"
    directory.mkdir()

    async def quick(_: float) -> None:
        await asyncio.sleep(0.05)

    follower = JournalFollower(
        "llm-two",
        LocalTransport("llm-two"),
        FollowerSettings(
            units=("vllm*.service",),
            journalctl_args=(f"--directory={directory}",),
            unit_discovery_interval_seconds=0.05,
        ),
        sleep=quick,
    )

    async def emit(_: object) -> None:
        return None

    task = asyncio.create_task(follower.run(emit))
    try:
        await _until(follower, "no_journal_files", up=False)
        with JournalWriter(directory, "t", binary=journal_remote, journalctl=journalctl) as writer:
            writer.write_readable([other_unit_line(to_realtime_us(datetime.now(UTC)))])
            await _until(follower, "", up=True)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
