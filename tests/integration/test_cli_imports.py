"""Each command imports only what it uses: the import graph of a real run, read with
``python -X importtime -m vllm_sentinel …`` (every module the process imported, nested ones
included, in the order they were loaded).

Start-up time is measured in ``benchmarks`` (``--only cli``), never asserted here; what is
asserted is the cause of a slow start: a command that pulls in the daemon's libraries.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vllm_sentinel.cli import INPUT_FORMATS, WATCH_EXIT_STATUSES, WATCH_PHASES
from vllm_sentinel.replay import InputFormat

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"

DAEMON_ONLY = ("asyncssh", "pynvml", "prometheus_client", "asyncio", "structlog", "cryptography")
"""Libraries of the daemon's edges (SSH, NVML, the exporter, the event loop, logging)."""


def imported_modules(*args: str, stdin: bytes | None = None) -> tuple[set[str], bytes]:
    """Run ``python -X importtime -m vllm_sentinel ARGS``; return every module it imported
    and its stdout. Fails the test when the command does not exit 0."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vllm_sentinel", *args],
        input=stdin, capture_output=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    lines = result.stderr.decode("utf-8", "replace").splitlines()
    assert result.returncode == 0, lines[-20:]
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in lines
        if line.startswith("import time:") and line.count("|") == 2
    }
    modules.discard("package")  # the header line: "import time: self [us] | cumulative | …"
    return modules, result.stdout


def loaded(modules: set[str], libraries: tuple[str, ...]) -> list[str]:
    """The modules of ``libraries`` (packages and their submodules) found in ``modules``."""
    return sorted(name for name in modules if name.split(".")[0] in libraries)


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        ("replay", "--help"),
        ("watch", "--help"),
        ("replay", str(LOG)),
        ("replay", "--output", "json", str(LOG)),
    ],
    ids=["version", "help", "replay-help", "watch-help", "replay-text", "replay-json"],
)
def test_replay_version_and_help_import_no_daemon_library(args: tuple[str, ...]) -> None:
    """``replay``, ``--version`` and ``--help`` load no SSH, NVML, pydantic, exporter,
    asyncio or structlog module (each costs tens of ms; asyncssh alone 0.2 s)."""
    modules, stdout = imported_modules(*args)
    assert stdout  # the command did its work
    assert "vllm_sentinel.cli" in modules  # the graph was read
    assert loaded(modules, (*DAEMON_ONLY, "pydantic", "pydantic_core")) == []
    if args[0] == "replay" and args[1] != "--help":
        assert "vllm_sentinel.engine.tracker" in modules  # the engine ran
    else:
        assert "vllm_sentinel.engine.tracker" not in modules  # help and version need no engine


def test_replay_of_stdin_imports_no_daemon_library() -> None:
    """The same for ``replay -`` (stdin), the shell-pipeline case."""
    modules, stdout = imported_modules("replay", "-", stdin=LOG.read_bytes())
    assert b"verdict:" in stdout
    assert loaded(modules, (*DAEMON_ONLY, "pydantic", "pydantic_core")) == []


def test_check_config_imports_no_ssh_nvml_or_exporter(tmp_path: Path) -> None:
    """``check-config`` validates with pydantic but loads no SSH, NVML, exporter, asyncio or
    structlog module, also for a config of remote hosts (their SSH settings are not built)."""
    config = tmp_path / "sentinel.toml"
    config.write_text(
        '[[hosts]]\nname = "gpu-1"\naddress = "10.0.0.5"\nknown_hosts = "/etc/ssh/known"\n'
        'units = ["vllm.service"]\n'
    )
    modules, stdout = imported_modules("check-config", str(config))
    assert stdout.startswith(f"{config}: OK".encode())
    assert loaded(modules, DAEMON_ONLY) == []


def test_input_formats_are_the_replay_formats() -> None:
    """``replay --format`` offers exactly the engine's input formats."""
    assert tuple(item.value for item in InputFormat) == INPUT_FORMATS


def test_watch_help_lists_the_phases_the_engine_has_and_every_exit_status() -> None:
    """``watch --help`` names the PHASE values ``--until`` takes (the engine's startup phases,
    without importing the engine) and every exit status of its contract, 130 and 141 too."""
    from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES
    from vllm_sentinel.watch import parse_until

    assert tuple(phase.value for phase in STARTUP_PHASES) == WATCH_PHASES
    assert all(parse_until(phase).phase is not None for phase in WATCH_PHASES)
    out = subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "watch", "--help"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    flat = " ".join(out.split())
    assert all(phase in flat for phase in WATCH_PHASES), flat
    assert " ".join(WATCH_EXIT_STATUSES.split()) in flat
    for status in ("0 ", "1 ", "2 ", "3 ", "4 ", "130 ", "141 "):
        assert f"; {status}" in WATCH_EXIT_STATUSES or WATCH_EXIT_STATUSES.startswith(
            f"Exit status: {status}"
        ), status
