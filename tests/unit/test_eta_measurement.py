"""scripts/measure-eta.py on the corpus: the ETA machinery end to end, and docs/eta.md current."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.snapshot import EtaBasis

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "measure-eta.py"
DOC = ROOT / "docs" / "eta.md"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure_eta", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def starts(script: ModuleType) -> list:  # type: ignore[type-arg]
    return list(script.measure())


def test_history_of_an_identical_start_predicts_it_exactly(starts: list) -> None:  # type: ignore[type-arg]
    """Replayed with its own earlier copy as history, every history-based estimate of a start
    (taken from the engine's state at that moment) hits its ready time to the second."""
    history_points = [
        point for start in starts for point in start.with_history if point.basis is EtaBasis.HISTORY
    ]
    assert len(history_points) >= 10
    assert {point.error_seconds for point in history_points} == {0.0}


def test_vllms_own_bar_in_a_pasted_log(script: ModuleType, starts: list) -> None:  # type: ignore[type-arg]
    """106 (vLLM 0.25.1, 49 shards over ten minutes, no times on the bar lines): at 10 % of
    the start tqdm's remaining time gives an estimate; with history, the estimate adds exactly
    the phases after loading that the earlier start took."""
    (start,) = [start for start in starts if start.log.startswith("106-")]
    first, known = start.first_start[0], start.with_history[0]
    assert first.basis is EtaBasis.VLLM and first.error_seconds is not None
    assert first.error_seconds < 0  # the end of the shard bar: compiling etc. still to come
    assert known.basis is EtaBasis.BOTH and known.error_seconds is not None
    (earlier,) = script.history_of(script.records_of(script.CORPUS / f"{start.log}.log"))
    after_loading = sum(
        seconds
        for phase, seconds in earlier.phase_seconds.items()
        if list(Phase).index(phase) > list(Phase).index(Phase.LOADING_WEIGHTS)
    )
    assert after_loading > 800  # 10m30s compiling, 3m44s profiling, …
    assert known.error_seconds - first.error_seconds == after_loading


def test_docs_show_the_current_measurement(script: ModuleType, starts: list) -> None:  # type: ignore[type-arg]
    """Every row the script gives for this corpus is in docs/eta.md (run it with --write)."""
    table = script.render(starts)
    doc = DOC.read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "median" not in line]
    missing = [row for row in rows if row not in doc]
    assert missing == [], "run: python scripts/measure-eta.py --write"
