"""``shard = "i/n"`` in a running daemon: it follows, exports and reports only its hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import free_port, running_daemon
from tests.support.journal_writer import JournalWriter
from vllm_sentinel.config import parse_config, shard_of

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def _name_on(shard: int, count: int, prefix: str) -> str:
    return next(
        f"{prefix}-{index}"
        for index in range(1000)
        if shard_of(f"{prefix}-{index}", count) == shard
    )


async def test_an_instance_watches_its_shard_only(
    journal_writer: JournalWriter, tmp_path: Path
) -> None:
    """Two hosts, shard 1/2: one is followed (collector, status); the other is nowhere."""
    mine, theirs = _name_on(1, 2, "gpu"), _name_on(2, 2, "gpu")
    hosts = "".join(
        f'[[hosts]]\nname = "{name}"\nlocal = true\ngpu = "none"\n'
        f'journalctl_args = ["--directory={journal_writer.path.parent}"]\n'
        for name in (mine, theirs)
    )
    config = parse_config(
        f'shard = "1/2"\n[exporter]\nlisten = "127.0.0.1:{free_port()}"\n'
        f'[defaults]\nstate_directory = "{tmp_path / "state"}"\n{hosts}'
    )
    assert [host.name for host in config.watched_hosts] == [mine]
    async with running_daemon(config) as daemon:
        samples = await daemon.wait_for(
            lambda s: any(name == "vllm_sentinel_collector_up" for name, _ in s),
            what="the journal collector's series",
        )
        hosts_seen = {
            dict(labels)["host"]
            for name, labels in samples
            if name.startswith("vllm_sentinel_") and "host" in dict(labels)
        }
        status = await daemon.status()
    assert hosts_seen == {mine}
    assert [host["host"] for host in status["hosts"]] == [mine]
    assert status["config"]["shard"] == "1/2"
