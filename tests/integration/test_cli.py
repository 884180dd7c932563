"""The command line as a user runs it: replay, check-config, demo, status."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon import current_phase, free_port, parse_metrics, value

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "vllm_sentinel"]
LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=60, check=False)


class TestReplay:
    """``vllm-sentinel replay``."""

    def test_text_timeline_and_verdict(self) -> None:
        """A journald paste prints three incarnations and the KV-cache root cause."""
        result = _run("replay", str(LOG))
        assert result.returncode == 0
        out = result.stdout.decode()
        assert out.count("  incarnation ") == 3
        assert "root cause kv_cache_insufficient: ValueError: To serve at least one request" in out
        assert out.rstrip().endswith("verdict: ready for 0s")

    def test_json_from_stdin(self) -> None:
        """``-`` reads stdin; ``--output json`` prints the documented document."""
        result = _run(
            "replay",
            "--output",
            "json",
            "--unit",
            "vllm-assistant.service",
            "-",
            stdin=LOG.read_bytes(),
        )
        assert result.returncode == 0
        (unit,) = json.loads(result.stdout)["units"]
        assert unit["unit"] == "vllm-assistant.service"
        assert [i["outcome"] for i in unit["incarnations"]] == ["stopped", "crashed", "ready"]
        crash = unit["incarnations"][1]["crash"]
        assert (crash["cause"], crash["exception"]) == ("kv_cache_insufficient", "ValueError")

    def test_several_text_files_stay_apart(self) -> None:
        """Two pasted logs are two units named after their files, never one merged timeline."""
        first = ROOT / "tests/golden/logs/005-v0-0.2-kv-cache-too-small.log"
        second = ROOT / "tests/golden/logs/001-port-in-use-after-startup-docker-compose.log"
        result = _run("replay", "--output", "json", str(first), str(second))
        assert result.returncode == 0
        units = {u["unit"]: u for u in json.loads(result.stdout)["units"]}
        assert set(units) == {first.name, second.name}
        assert units[second.name]["incarnations"][-1]["crash"]["cause"] == "port_in_use"
        assert units[first.name]["incarnations"][-1]["furthest_phase"] == "profiling_kv_cache"

    def test_text_without_vllm_lines_is_not_a_unit(self) -> None:
        """Text with nothing of vLLM's shape reports no unit."""
        result = _run("replay", "-", stdin=b"hello world\nnothing to see\n")
        assert result.returncode == 0
        assert result.stdout.decode().strip() == "no vLLM records found"

    def test_directory_is_named_as_such(self, tmp_path: Path) -> None:
        """A directory is refused as a directory, not as a missing file."""
        result = _run("replay", str(tmp_path))
        assert result.returncode == 2
        assert "is a directory" in result.stderr.decode()

    def test_unreadable_input_exits_2(self, tmp_path: Path) -> None:
        """A missing file is one line on stderr and exit status 2."""
        result = _run("replay", str(tmp_path / "missing.log"))
        assert result.returncode == 2
        assert result.stderr.decode().count("\n") == 1 and "cannot read" in result.stderr.decode()


class TestCheckConfig:
    """``vllm-sentinel check-config``."""

    def test_example_config_is_valid(self) -> None:
        """The shipped example passes."""
        result = _run("check-config", str(ROOT / "config.example.toml"))
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().splitlines()[0].endswith(": OK")

    def test_every_bad_key_is_reported(self, tmp_path: Path) -> None:
        """Two mistakes, one error, both paths, exit 2."""
        bad = tmp_path / "bad.toml"
        bad.write_text(
            '[exporter]\nlisten = "nowhere"\n[[hosts]]\nname = "a"\nlocal = true\n'
            'units = ["vllm; touch /tmp/pwned"]\n'
        )
        result = _run("check-config", str(bad))
        assert result.returncode == 2
        err = result.stderr.decode()
        assert "exporter.listen" in err and "hosts[0].units[0]" in err


def _watch_demo(url: str) -> tuple[set[str], set[str], bool]:
    """Poll /metrics until the demo showed phases moving, both crash causes and a stall."""
    phases: set[str] = set()
    causes: set[str] = set()
    stalled = False
    deadline = time.monotonic() + 50
    wanted = {"dependency_mismatch", "kv_cache_insufficient"}
    while time.monotonic() < deadline and not (causes >= wanted and stalled and len(phases) >= 3):
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
                samples = parse_metrics(response.read().decode())
        except OSError:
            time.sleep(0.2)  # the server is still starting: poll again, bounded by the deadline
            continue
        phase = current_phase(samples, "vllm-kimi-k25.service")
        if phase:
            phases.add(phase)
        causes |= {
            dict(labels)["cause"]
            for (name, labels), v in samples.items()
            if name == "vllm_sentinel_unit_crashes_total" and v > 0
        }
        stalled = (
            stalled
            or value(samples, "vllm_sentinel_unit_stalled", unit="vllm-llama-405b.service") == 1
        )
        time.sleep(0.2)
    return phases, causes, stalled


@pytest.mark.integration
def test_demo_shows_phases_moving_and_crash_causes() -> None:
    """``vllm-sentinel demo``: /metrics shows the phase moving and the crash causes; status works."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--speed", "6", "--duration", "60"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        try:
            phases, causes, stalled = _watch_demo(url)
            status = subprocess.run(
                [*CLI, "status", "--url", url], capture_output=True, timeout=30, check=False
            )
        finally:
            demo.send_signal(signal.SIGINT)  # Ctrl-C, as the demo's banner says
            out, err = demo.communicate(timeout=10)
    assert demo.returncode == 0, err.decode()
    assert b"Traceback" not in err
    assert {"loading_weights", "crashed"} <= phases, phases
    assert causes >= {"dependency_mismatch", "kv_cache_insufficient"}
    assert stalled
    assert status.returncode == 0
    assert "vllm-kimi-k25.service" in status.stdout.decode()
    assert b"curl -s" in out
