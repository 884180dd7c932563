"""The golden corpus is the shared corpus: ``tests/golden/logs`` holds ``../shared/corpus``'s logs
byte for byte, and each ``*.expected.json`` repeats that log's ``LABELS.md`` cells verbatim (escapes kept) (the
answers ``test_golden.py`` asserts exactly come from the shared labels, not from a copy that
drifted). Runs where the shared folder sits beside the checkout (a developer's machine); skipped
where it does not — CI runs on a bare clone, without it — and there the copies themselves are the
golden tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.golden.scoring import LABEL_COLUMNS

HERE = Path(__file__).parent
SHARED = HERE.parents[2] / "shared" / "corpus"


def _shared() -> Path:
    if not (SHARED / "LABELS.md").is_file():
        pytest.skip(f"{SHARED} is not beside this checkout")
    return SHARED


def _rows(shared: Path) -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    for line in (shared / "LABELS.md").read_text(encoding="utf-8").splitlines():
        if not re.match(r"^\| \d{3}-", line):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == len(LABEL_COLUMNS), line[:80]
        rows[cells[0]] = dict(zip(LABEL_COLUMNS, cells, strict=True))
    return rows


def test_every_shared_log_is_in_the_golden_corpus_byte_for_byte() -> None:
    shared = _shared()
    logs = sorted(path.name for path in shared.glob("*.log"))
    assert len(logs) >= 40
    for name in logs:
        assert (HERE / "logs" / name).read_bytes() == (shared / name).read_bytes(), name


def test_every_expected_file_repeats_its_shared_labels_row() -> None:
    rows = _rows(_shared())
    assert len(rows) >= 40
    for name, row in rows.items():
        document = json.loads((HERE / "logs" / name).with_suffix(".expected.json").read_text())
        assert document["source"] == row["source"], name
        for column in LABEL_COLUMNS[2:8]:
            assert document["labels"][column] == row[column], (name, column)
