"""First contact, round two (issue 21): what a new user met trying the commands after the
docs/install.md's install, each defect with its test.

* ``status`` and ``run`` find the config the install writes (``$VLLM_SENTINEL_CONFIG``, else
  ``/etc/vllm-sentinel/config.toml``) when no ``--config``/``--url`` is given; ``status`` takes
  the address from it;
* ``check-config`` fails, as ``run`` does and in its words, for a state directory ``run`` cannot create;
* ``replay --format json`` on plain text says it is not journal JSON (exit 2);
* the same failure is worded the same by ``run --config`` and ``check-config``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import free_port
from tests.support.snapshots import basic_snapshot
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import make_app, start_http_server

CLI = [sys.executable, "-m", "vllm_sentinel"]


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    base = {key: value for key, value in os.environ.items() if key != "VLLM_SENTINEL_CONFIG"}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        timeout=timeout,
        check=False,
        env={**base, **(env or {})},
    )


@contextlib.contextmanager
def _exporter() -> Iterator[int]:
    """A real exporter HTTP server on 127.0.0.1 serving a /status document: its port."""
    registry = make_registry(SentinelCollector(basic_snapshot))
    app = make_app(registry, lambda: status_document(basic_snapshot()))
    handle = start_http_server("127.0.0.1", 0, app)
    try:
        yield handle.port
    finally:
        handle.shutdown()


class TestConfigFoundWithoutAnOption:
    """``$VLLM_SENTINEL_CONFIG`` (or /etc/vllm-sentinel/config.toml) when no option says."""

    def test_status_takes_the_address_from_the_config(self, tmp_path: Path) -> None:
        """status without --url asks the address of the config's [exporter] listen."""
        with _exporter() as port:
            config = tmp_path / "config.toml"
            config.write_text(f'[exporter]\nlisten = "127.0.0.1:{port}"\n')
            result = _run("status", "--json", env={"VLLM_SENTINEL_CONFIG": str(config)})
        assert result.returncode == 0, result.stderr.decode()
        assert b'"hosts"' in result.stdout

    def test_status_listening_everywhere_asks_loopback(self, tmp_path: Path) -> None:
        """listen = "0.0.0.0:PORT" is asked at 127.0.0.1:PORT."""
        port = free_port()
        config = tmp_path / "config.toml"
        config.write_text(f'[exporter]\nlisten = "0.0.0.0:{port}"\n')
        result = _run("status", env={"VLLM_SENTINEL_CONFIG": str(config)})
        assert result.returncode == 2
        assert result.stderr.decode().startswith(
            f"vllm-sentinel: cannot read http://127.0.0.1:{port}/status: connection refused"
        )

    def test_url_wins_over_the_config(self, tmp_path: Path) -> None:
        """An explicit --url is asked, not the config's address."""
        config = tmp_path / "config.toml"
        config.write_text('[exporter]\nlisten = "127.0.0.1:1"\n')
        with _exporter() as port:
            result = _run(
                "status",
                "--json",
                f"--url=http://127.0.0.1:{port}",
                env={"VLLM_SENTINEL_CONFIG": str(config)},
            )
        assert result.returncode == 0, result.stderr.decode()

    def test_run_reads_the_config_named_by_the_variable(self, tmp_path: Path) -> None:
        """run without --config validates $VLLM_SENTINEL_CONFIG's file (an invalid one is
        refused, naming it) rather than watching this host with the defaults."""
        config = tmp_path / "config.toml"
        config.write_text('[exporter]\nlisten = "not an address"\n')
        result = _run("run", env={"VLLM_SENTINEL_CONFIG": str(config)})
        assert result.returncode == 2
        err = result.stderr.decode()
        assert err.startswith(f"vllm-sentinel: {config}: 1 invalid key\n  exporter.listen: "), err

    def test_a_variable_naming_a_missing_file_is_an_error(self, tmp_path: Path) -> None:
        """$VLLM_SENTINEL_CONFIG names a file that is not there: one line, exit 2."""
        missing = tmp_path / "nope.toml"
        for command in ("run", "status"):
            result = _run(command, env={"VLLM_SENTINEL_CONFIG": str(missing)})
            assert result.returncode == 2, command
            assert result.stderr.decode() == (
                f"vllm-sentinel: cannot read {missing}: no such file or directory "
                "(named by $VLLM_SENTINEL_CONFIG)\n"
            )


class TestSameFailureSameWords:
    """run --config and check-config say the same of the same file."""

    @pytest.mark.parametrize("case", ["missing", "directory", "invalid"])
    def test_run_and_check_config_agree(self, tmp_path: Path, case: str) -> None:
        """A missing file, a directory, an invalid key: the same line from both commands."""
        path = tmp_path / "nope.toml"
        if case == "directory":
            path.mkdir()
        elif case == "invalid":
            path.write_text("[exporter]\nlisten = 7\n")
        ran = _run("run", "--config", str(path))
        checked = _run("check-config", str(path))
        assert (ran.returncode, checked.returncode) == (2, 2)
        assert ran.stderr.decode() == checked.stderr.decode()
        assert ran.stderr.decode().startswith("vllm-sentinel: ")


class TestStateDirectoryUnderProc:
    """check-config says what run says of a state directory run cannot create."""

    def test_check_config_fails_as_run_fails(self, tmp_path: Path) -> None:
        """/proc/vllm-sentinel: run refuses to start; check-config fails too (exit 2), in its
        words (it said OK, with a warning)."""
        config = tmp_path / "config.toml"
        config.write_text(
            '[exporter]\nlisten = "127.0.0.1:{port}"\n[defaults]\n'
            'state_directory = "/proc/vllm-sentinel"\n'.replace("{port}", str(free_port()))
        )
        ran = _run("run", "--config", str(config))
        assert ran.returncode == 2
        said = ran.stderr.decode().strip().removeprefix("vllm-sentinel: ")
        assert said.startswith("state directory /proc/vllm-sentinel: cannot write there: ")
        checked = _run("check-config", str(config))
        assert (checked.returncode, checked.stdout) == (2, b"")
        assert checked.stderr.decode() == ran.stderr.decode()


class TestRunbookALinkCanOpen:
    """replay's hints name the runbook the package installed (a file that is there)."""

    def test_replay_names_an_existing_runbook(self) -> None:
        """``(see PATH#cause)``: PATH is a readable file holding the cause's section."""
        log = Path(__file__).parents[1] / "golden/logs/007-v0-tp-worker-oom-while-others-load.log"
        result = _run("replay", str(log))
        assert result.returncode == 0, result.stderr.decode()
        links = re.findall(r"\(see ([^()#]+)#(\w+)\)", result.stdout.decode())
        assert links, result.stdout.decode()
        for path, cause in links:
            assert path.endswith("runbook.md") and Path(path).is_file(), path
            assert f"### {cause}" in Path(path).read_text(encoding="utf-8")


class TestReplayFormatJson:
    """replay --format json of a file that is not journal JSON."""

    def test_plain_text_is_not_journal_json(self, tmp_path: Path) -> None:
        """One line saying so (and how to read it), exit 2; not "no vLLM records found"."""
        log = tmp_path / "vllm.log"
        log.write_text("INFO 11-28 23:35:58 [api_server.py:1] vLLM API server version 0.11.0\n")
        result = _run("replay", "--format", "json", str(log))
        assert result.returncode == 2
        assert result.stdout == b""
        assert result.stderr.decode() == (
            f"vllm-sentinel: {log}: not journal JSON (journalctl -o json): no line is a JSON "
            "object; read it as text with --format text (or auto)\n"
        )
