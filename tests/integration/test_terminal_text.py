"""``replay`` prints no terminal control sequence from the log (issue 22 defect 6), run as
the real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.unit.test_trust import HOSTILE

pytestmark = pytest.mark.integration

_CONTROLS = {chr(code) for code in (*range(0x20), *range(0x7F, 0xA0))} - {"\t", "\n"}


def _entry(message: str, seconds: int) -> bytes:
    return orjson.dumps(
        {
            "__CURSOR": f"s=1;i={seconds}",
            "__REALTIME_TIMESTAMP": str(1764410400000000 + seconds * 1_000_000),
            "_SYSTEMD_UNIT": "vllm-a.service",
            "_SYSTEMD_INVOCATION_ID": "a" * 32,
            "_PID": "7",
            "MESSAGE": message,
        }
    )


@pytest.mark.parametrize("output", ["text", "json"])
def test_replay_prints_no_control_sequence(tmp_path: Path, output: str) -> None:
    """A crash whose exception message carries ESC c, OSC, DCS, C1 CSI and backspaces
    (journal JSON keeps them all)."""
    log = tmp_path / "hostile.jsonl"
    lines = [
        "INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.11.0",
        "ERROR 11-29 10:00:05 [core.py:1] Traceback (most recent call last):",
        'ERROR 11-29 10:00:05 [core.py:1]   File "x.py", line 1, in run',
        f"ERROR 11-29 10:00:05 [core.py:1] RuntimeError: boom {HOSTILE}",
    ]
    log.write_bytes(b"\n".join(_entry(line, n) for n, line in enumerate(lines)) + b"\n")
    result = subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "replay", "--output", output, str(log)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode("utf-8")
    assert "boom" in out
    assert not _CONTROLS & set(out)
    if output == "json":
        # nor any value once decoded: `jq -r .…message` writes what the value holds
        assert not [text for text in _strings(orjson.loads(out)) if _CONTROLS & set(text)]


def _strings(value: object) -> list[str]:
    """Every string of a JSON document, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (key, *_strings(item))]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []
