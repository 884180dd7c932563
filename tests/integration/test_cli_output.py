"""stdout that cannot be written, in every command: a closed pipe (``| head -1``) exits 141
quietly (the shell's status for a writer killed by SIGPIPE, not "crashed"); a full disk
(``> /dev/full``) is one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.test_watch import UNIT, B, _ready, _start
from tests.support.journal_writer import JournalWriter, other_unit_line, to_realtime_us

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "vllm_sentinel"]
LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"
FULL = "vllm-sentinel: cannot write the output: No space left on device\n"


def _to_dev_full(*args: str) -> tuple[int, str]:
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [*CLI, *args], stdout=full, stderr=subprocess.PIPE, timeout=120, check=False
        )
    return result.returncode, result.stderr.decode()


def _to_closed_pipe(*args: str) -> tuple[int, str]:
    """The command's stdout is a pipe whose reader has already gone (``| head -0``)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [*CLI, *args], stdout=writer, stderr=subprocess.PIPE, timeout=120, check=False
        )
    finally:
        os.close(writer)
    return result.returncode, result.stderr.decode()


def _journal(journal_writer: JournalWriter) -> list[str]:
    started = datetime.now(UTC) - timedelta(seconds=30)
    journal_writer.write_readable(
        [
            other_unit_line(to_realtime_us(started) - 1),
            *_start(B, started, 4200),
            *_ready(B, started, 4200),
        ]
    )
    return [UNIT, f"--directory={journal_writer.path.parent}", "--timeout=60s"]


@pytest.mark.parametrize(
    "args",
    [("replay", str(LOG)), ("replay", "--output=json", str(LOG)), ("init-config",), ("--help",)],
    ids=["replay", "replay-json", "init-config", "help"],
)
def test_a_full_disk_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    assert _to_dev_full(*args) == (2, FULL)


def test_check_config_to_a_full_disk(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[defaults]\nstate_directory = "{tmp_path}"\n[[hosts]]\nname = "a"\nlocal = true\n'
    )
    assert _to_dev_full("check-config", str(config)) == (2, FULL)


@pytest.mark.parametrize(
    "args",
    [("replay", str(LOG)), ("replay", "--output=json", str(LOG)), ("init-config",), ("--help",)],
    ids=["replay", "replay-json", "init-config", "help"],
)
def test_a_closed_pipe_is_141_and_quiet(args: tuple[str, ...]) -> None:
    assert _to_closed_pipe(*args) == (141, "")


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["lines", "json"])
def test_watch_to_a_closed_pipe_is_141_and_quiet(
    journal_writer: JournalWriter, extra: tuple[str, ...]
) -> None:
    assert _to_closed_pipe("watch", *_journal(journal_writer), *extra) == (141, "")


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["lines", "json"])
def test_watch_to_a_full_disk(journal_writer: JournalWriter, extra: tuple[str, ...]) -> None:
    assert _to_dev_full("watch", *_journal(journal_writer), *extra) == (2, FULL)


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["text", "json"])
def test_status_to_a_full_disk_and_to_a_closed_pipe(extra: tuple[str, ...]) -> None:
    """``status`` against a real exporter: /dev/full is one line and 2, a closed pipe 141."""
    from tests.integration.test_cli import _exporter

    with _exporter(None, users=False) as url:
        full = _to_dev_full("status", "--url", url, *extra)
        closed = _to_closed_pipe("status", "--url", url, *extra)
    assert (full, closed) == ((2, FULL), (141, ""))
