"""Golden exposition: the hand-built snapshot rendered as Prometheus text, checked twice.

``basic.prom`` is compared after normalising (lines sorted, the build version replaced) so that
family order does not matter; ``promtool check metrics`` lints the same file. Run pytest with
``--update-golden`` to rewrite it, then review the git diff.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from tests.conftest import require_binary
from tests.support.snapshots import basic_snapshot, modes_snapshot
from vllm_sentinel import __version__
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry

HERE = Path(__file__).parent
GOLDEN = HERE / "basic.prom"
MODES = HERE / "modes.prom"  # vLLM 0.33's modes: modes_snapshot()


def render(build: object = basic_snapshot) -> str:
    """The exposition of ``basic_snapshot()`` (or another builder's), with the build version
    made stable."""
    snapshot = build()  # type: ignore[operator]
    text = generate_latest(make_registry(SentinelCollector(lambda: snapshot))).decode()
    return text.replace(f'{{version="{__version__}"}}', '{version="VERSION"}')


def normalise(text: str) -> list[str]:
    """Sorted non-empty lines (KSM-style); label pairs are already sorted by the client."""
    return sorted(line for line in text.splitlines() if line)


class TestGoldenExposition:
    def test_matches_golden_file(self, update_golden: bool) -> None:
        """The rendered exposition equals basic.prom, line for line after sorting."""
        text = render()
        if update_golden:
            GOLDEN.write_text(text, encoding="utf-8")
        assert normalise(text) == normalise(GOLDEN.read_text(encoding="utf-8"))

    def test_modes_match_golden_file(self, update_golden: bool) -> None:
        """vLLM 0.33's modes (sleeping, weight cache, watchdog, ready timeout) render as
        modes.prom."""
        text = render(modes_snapshot)
        if update_golden:
            MODES.write_text(text, encoding="utf-8")
        assert normalise(text) == normalise(MODES.read_text(encoding="utf-8"))

    @pytest.mark.integration
    @pytest.mark.parametrize("golden", [GOLDEN, MODES], ids=["basic", "modes"])
    def test_promtool_accepts_golden_file(self, golden: Path) -> None:
        """``promtool check metrics`` finds no parse error and no lint finding."""
        promtool = require_binary("promtool")
        result = subprocess.run(
            [promtool, "check", "metrics"],
            input=golden.read_bytes(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
