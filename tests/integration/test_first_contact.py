"""What a new user meets first (issue 14): help text, wrapped verdicts, run --listen, demo
options, and a ``status`` that says why a daemon shows no unit."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.daemon import free_port, local_config, local_config_text, running_daemon
from tests.support.http_errors import closed
from tests.support.journal_writer import JournalWriter, service_line, to_realtime_us
from vllm_sentinel.cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "vllm_sentinel"]
LONG = ROOT / "tests/golden/logs/007-v0-tp-worker-oom-while-others-load.log"
_RST = re.compile(r"``|:(?:func|class|meth|mod|attr|ref):`|^\s*\.\. \w+::|\*\*\w", re.MULTILINE)


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return {**env, **extra}


class TestHelp:
    @pytest.mark.parametrize("command", [None, *sorted(cli.commands)])
    def test_help_is_plain_terminal_text(self, command: str | None) -> None:
        """Every command's --help has text and no reStructuredText markup (``x``, :func:)."""
        args = [command, "--help"] if command else ["--help"]
        result = CliRunner().invoke(cli, args, terminal_width=100)
        assert result.exit_code == 0, result.output
        assert _RST.findall(result.output) == []
        description = result.output.split("\n\n")[1]
        assert len(description.split()) >= 5, result.output

    def test_the_check_finds_markup(self) -> None:
        """The pattern catches what replay --help used to show."""
        assert _RST.findall("each plain-text file is one unit (``vllm``, or :func:`x`)")


def _verdicts(text: str) -> list[str]:
    """Each verdict, its wrapped continuation lines joined back with single spaces."""
    verdicts: list[str] = []
    in_verdict = False
    for line in text.splitlines():
        if line.startswith("    verdict: "):
            verdicts.append(line.strip())
            in_verdict = True
        elif line.startswith("      ") and in_verdict:
            verdicts[-1] += " " + line.strip()
        else:
            in_verdict = False
    return verdicts


def _replay_on_a_terminal(path: Path, columns: int) -> str:
    """Run replay with its stdout on a pseudo-terminal ``columns`` wide; return what it shows."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    with subprocess.Popen(
        [*CLI, "replay", str(path)], stdout=terminal, stderr=subprocess.PIPE, env=_env()
    ) as process:
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=60)
    os.close(controller)
    assert process.returncode == 0
    return b"".join(chunks).decode().replace("\r\n", "\n")


class TestWrappedVerdicts:
    def test_a_long_verdict_wraps_to_the_terminal(self) -> None:
        """On a 60-column terminal every line fits (but a single longer word), same words."""
        wrapped = _replay_on_a_terminal(LONG, 60)
        piped = subprocess.run(
            [*CLI, "replay", str(LONG)], capture_output=True, env=_env(COLUMNS="60"), check=True
        ).stdout.decode()
        too_long = [
            line for line in wrapped.splitlines() if len(line) > 60 and len(line.split()) > 1
        ]
        phase_lines = [line for line in too_long if not line.startswith(("    verdict", "      "))]
        assert too_long == phase_lines  # only verdicts and hints are wrapped
        one_line = [line.strip() for line in piped.splitlines() if line.startswith("    verdict:")]
        assert (
            max(len(line) for line in one_line) > 500
        )  # the case of the issue, one line in a pipe
        assert [" ".join(v.split()) for v in _verdicts(wrapped)] == [
            " ".join(v.split()) for v in one_line
        ]

    def test_json_keeps_the_whole_message(self) -> None:
        """--output json carries the exception message whole, whatever the terminal."""
        result = subprocess.run(
            [*CLI, "replay", "--output", "json", str(LONG)],
            capture_output=True,
            env=_env(COLUMNS="40"),
            check=True,
        )
        crashes = [
            incarnation["crash"]
            for unit in json.loads(result.stdout)["units"]
            for incarnation in unit["incarnations"]
            if incarnation.get("crash")
        ]
        assert max(len(crash["message"]) for crash in crashes) > 400
        assert all("\n" not in crash["message"] for crash in crashes)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.URLError as error:
        closed(error)
        return 0


@pytest.mark.integration
class TestRunListen:
    def test_listen_replaces_the_configured_address(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """run --listen serves there, not on the config's exporter.listen."""
        configured, wanted = free_port(), free_port()
        path = tmp_path / "config.toml"
        path.write_text(
            local_config_text(journal_writer.path.parent, tmp_path / "state", port=configured)
        )
        command = [*CLI, "run", "--config", str(path), "--listen", f"127.0.0.1:{wanted}"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as daemon:
            try:
                deadline = time.monotonic() + 30
                while _get(f"http://127.0.0.1:{wanted}/healthz") != 200:
                    assert daemon.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
                assert _get(f"http://127.0.0.1:{configured}/healthz") == 0
            finally:
                daemon.send_signal(signal.SIGTERM)
                _out, err = daemon.communicate(timeout=30)
        assert daemon.returncode == 0, err.decode()[-2000:]

    def test_a_bad_listen_is_one_line(self) -> None:
        """An address that is not HOST:PORT: one line, exit 2, before anything starts."""
        result = subprocess.run(
            [*CLI, "run", "--listen", "9842"], capture_output=True, timeout=30, check=False
        )
        assert result.returncode == 2
        assert result.stderr.decode() == (
            "vllm-sentinel: --listen: '9842': expected host:port, e.g. 127.0.0.1:9842 or "
            "[::1]:9842\n"
        )


@pytest.mark.integration
class TestDemoOptions:
    def test_demo_suggests_status_and_takes_a_log_level(self) -> None:
        """The banner names `status` and `status --json` for its URL; --log-level is honoured."""
        port = free_port()
        command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--duration", "2",
                   "--log-level", "debug"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr.decode()
        url = f"http://127.0.0.1:{port}"
        lines = [line.strip() for line in result.stdout.decode().splitlines()]
        me = f"{Path(sys.executable).name} -m vllm_sentinel"
        assert f"units:   {me} status --url {url}" in lines
        assert f"all:     {me} status --url {url} --json" in lines
        assert "http_server_started" in result.stderr.decode()  # an info event: shown at debug

    def test_a_bad_log_level_is_refused(self) -> None:
        """Not one of debug, info, warning, error: click's usage error, exit 2."""
        result = subprocess.run(
            [*CLI, "demo", "--log-level", "loud"], capture_output=True, timeout=30, check=False
        )
        assert result.returncode == 2
        assert "Invalid value for '--log-level'" in result.stderr.decode()


@pytest.mark.integration
@pytest.mark.asyncio
class TestStatusWithoutUnits:
    async def test_says_which_patterns_on_which_host(
        self, journal_writer: JournalWriter, tmp_path: Path
    ) -> None:
        """A journal with no matching unit: `status` says so, naming the host and the globs."""
        journal_writer.write_and_flush(
            [
                service_line(
                    "nginx.service", "e" * 32, 5, "started", to_realtime_us(datetime.now(UTC))
                )
            ]
        )
        journal_writer.wait_until_readable(1)
        config = local_config(journal_writer.path.parent, tmp_path / "state")
        async with running_daemon(config) as daemon:
            deadline = time.monotonic() + 20
            document = await daemon.status()
            while not document["hosts"][0]["collectors"].get("journal", {}).get("up"):
                assert time.monotonic() < deadline, document
                await asyncio.sleep(0.05)
                document = await daemon.status()
            assert document["hosts"][0]["unit_patterns"] == ["vllm-*.service"]
            assert document["hosts"][0]["units_followed"] == []
            result = await asyncio.to_thread(
                subprocess.run,
                [*CLI, "status", "--url", daemon.url],
                capture_output=True,
                timeout=30,
                check=False,
            )
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout.decode().splitlines()[1:] == [
            "host llm-two: journal up",
            "no units seen yet:",
            "  llm-two: no unit in its journal matches vllm-*.service yet",
        ]
