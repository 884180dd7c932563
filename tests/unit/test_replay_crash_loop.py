"""replay on a crash loop: the last incarnations, and what the earlier ones were (issue 19, 7).

A unit that crash-loops for a day leaves thousands of starts. The log here repeats two real
starts of vLLM 0.8.5 (lines as vllm-project/vllm#10439 and #14574 print them): one that dies
of a KV cache too small for its model and one the kernel kills, 2,001 starts in all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_sentinel.engine.report import render_text, to_json
from vllm_sentinel.replay import replay

_BANNER = "INFO 03-10 08:{m:02d}:{s:02d} [api_server.py:1043] vLLM API server version 0.8.5"
_LOAD = (
    "INFO 03-10 08:{m:02d}:{s:02d} [gpu_model_runner.py:1329] Starting to load model "
    "Qwen/Qwen2.5-0.5B-Instruct..."
)
_KV = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)


def _loop(starts: int) -> bytes:
    lines = []
    for number in range(starts):
        minute, second = divmod(number, 60)
        minute %= 60
        lines.append(_BANNER.format(m=minute, s=second))
        lines.append(_LOAD.format(m=minute, s=second))
        lines.append("Killed" if number % 2 else _KV)
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def crash_loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("loop") / "loop.log"
    path.write_bytes(_loop(2001))
    return path


def test_text_says_what_the_earlier_incarnations_were(crash_loop: Path) -> None:
    """The last 8 are shown with their real numbers; the 1,993 before them are summed up."""
    (unit,) = replay([[crash_loop.read_bytes()]]).units
    text = render_text([unit])
    assert "unit vllm: 2,001 incarnations (the last 8 shown; --all shows every one)" in text
    assert (
        "  1,993 earlier incarnations: 997 kv_cache_insufficient, 996 killed "
        "(first at 1970-03-10 08:00:00, last ended 1970-03-10 08:33:12)"
    ) in text
    assert "  incarnation 1,994 (vLLM 0.8.5" in text and "  incarnation 2,001 (" in text
    assert "  incarnation 1 (" not in text
    assert "  totals: 2,001 starts, 2,001 crashes: 1,001 kv_cache_insufficient, 1,000 killed" in (
        text
    )


def test_json_has_the_earlier_incarnations(crash_loop: Path) -> None:
    """`--output json` says the same: how many, by outcome or cause, and when."""
    (unit,) = replay([[crash_loop.read_bytes()]]).units
    document = to_json([unit])["units"][0]
    assert len(document["incarnations"]) == 8
    assert document["earlier_incarnations"] == {
        "count": 1993,
        "by_outcome": {"kv_cache_insufficient": 997, "killed": 996},
        "first_started_at": "1970-03-10T08:00:00",  # plain text's times name no zone
        "last_ended_at": "1970-03-10T08:33:12",
    }
    assert document["starts_total"] == 2001
    assert document["crashes_total"] == {"killed": 1000, "kv_cache_insufficient": 1001}


def test_no_earlier_incarnations_no_key() -> None:
    """A log whose every incarnation is shown has no summary (the document is unchanged)."""
    (unit,) = replay([[_loop(3)]]).units
    assert "earlier_incarnations" not in to_json([unit])["units"][0]
    assert "unit vllm: 3 incarnations\n" in render_text([unit])


def test_counts_are_written_in_singular_and_plural() -> None:
    """One of a thing is singular (a new user's trial read ``1 incarnation(s)``, ``1 crashes``,
    ``1 earlier incarnations``)."""
    (unit,) = replay([[_loop(1)]]).units
    assert "unit vllm: 1 incarnation\n" in render_text([unit])
    (unit,) = replay([[_loop(4)]], keep=3).units
    text = render_text([unit])
    assert "  1 earlier incarnation: 1 kv_cache_insufficient" in text
    assert "  totals: 4 starts, 4 crashes: 2 killed, 2 kv_cache_insufficient" in text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "replay", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[2],
    )


def test_all_prints_every_incarnation(crash_loop: Path) -> None:
    """`--all`: 2,001 incarnations, numbered 1 to 2,001, no summary line."""
    done = _cli("--all", str(crash_loop))
    assert done.returncode == 0, done.stderr
    assert "unit vllm: 2,001 incarnations\n" in done.stdout
    assert done.stdout.count("\n  incarnation ") == 2001
    assert "earlier incarnations" not in done.stdout


def test_last_chooses_how_many(crash_loop: Path) -> None:
    """`--last 3` shows 3, in text and JSON; `--last 1` is a usage error (status 2)."""
    done = _cli("--last", "3", "--output", "json", str(crash_loop))
    assert done.returncode == 0, done.stderr
    (unit,) = json.loads(done.stdout)["units"]
    assert len(unit["incarnations"]) == 3
    assert unit["earlier_incarnations"]["count"] == 1998
    bad = _cli("--last", "1", str(crash_loop))
    assert bad.returncode == 2
    assert "Invalid value for '--last'" in bad.stderr.strip().splitlines()[-1]
