"""The labelled sets of issues 10 and 19: real logs, labelled by hand before the engine ran on them.

Five sets (``scoring.SETS``): ``validation/`` (the first set, since used to improve the engine),
``holdout/`` (the second, read miss by miss since), ``fresh/`` (the third, read miss by miss after
its first run), ``fresh2/`` (issue 19's held-out set, mostly crashes, never used to change the
engine, so it measures how root causes generalise) and ``fresh3/`` (issue 19's second held-out set
of crashes, built the same way; not run yet). Each ``NNN-slug.log`` was labelled by hand
before the engine ever ran on it (``LABELS.md`` and ``README.md`` of each set). Here the engine
replays each log and every confident label is compared; the engine must never raise, and each
set's score must reach the issue's bar (95 %) — except a set in ``BELOW_BAR``, which must not fall
below its recorded score (the lead decides on the fixes), or is only printed while its first run
is not recorded yet. The files are the data: nothing below names a log.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.golden.scoring import (
    BAR,
    KEYS,
    LABEL_COLUMNS,
    SETS,
    Score,
    format_report,
    matches,
    score_directory,
    score_log,
)
from vllm_sentinel.engine.catalog.causes import CrashCause

LOGS = {name: sorted(directory.glob("*.log")) for name, directory in SETS.items()}
CORPUS = Path(__file__).parent / "logs"
"""The golden corpus (``tests/golden/logs``: the shared corpus's logs, each with its source)."""
ALL_LOGS = [(name, log) for name, logs in LOGS.items() for log in logs]
ALL_IDS = [f"{name}/{log.stem}" for name, log in ALL_LOGS]
MINIMUM = {"validation": 14, "holdout": 16, "fresh": 12, "fresh2": 22, "fresh3": 26}
"""Logs a set must hold (issue 10: at least 12 for the first set; the holdout brief: 16; the fresh
set's brief: 12 to 16; issue 19's fresh set: at least 20, its brief 22; issue 19's second fresh
set: at least 20, it holds 28)."""

RECORDED = {"validation": 100, "holdout": 69, "fresh": 42, "fresh2": 82, "fresh3": 71}
"""Confident labels each set gets right as last recorded (the sets' READMEs, "After fixes"):
a change that loses one fails here even while the set stays above the bar. fresh3's first run
was 60 of 74 (its README's "First run"); 71 after five of its misses' classes were fixed in
general (its README's "After fixes"). Holdout 601's
furthest phase is the one known disagreement: its label says compiling (the last marker), the
engine says profiling_kv_cache (the assertion is raised in memory profiling: issue 19's rule that
the innermost vLLM frames name the phase)."""

MINIMUM_LABELS = {"validation": 50, "holdout": 50, "fresh": 40, "fresh2": 80, "fresh3": 70}
"""Confident labels a set must hold (the fresh set's excerpts carry fewer confident labels)."""

BELOW_BAR: dict[str, int | None] = {"fresh": 42, "fresh2": 76, "fresh3": 71}
"""Sets held to their recorded score instead of the bar: set -> confident labels right then, or
``None`` while the set's first run is not recorded yet (not measured: no floor is asserted).

The fresh set scored 37 of 45 (82.2 %) on its first run, below the 95 % bar; every miss and its
class are in ``tests/golden/fresh/README.md`` ("First run"). Its labels are never changed after
that run and no engine rule may be tuned to its lines, so the bar is not asserted for it until the
lead has decided on the classes it missed; it may not get worse than its last recorded score
(raised as classes of its misses are fixed in general: README "After fixes").

The fresh2 set (issue 19) scored 76 of 82 on its first run (its README's "First run"); that run is
its floor here.

The fresh3 set (issue 19's second held-out set) scored 60 of 74 on its first run (its README's
"First run", the engine of ``e025858``); after the fixes of its README's "After fixes", 71 of 74,
its floor here (no longer a generalisation figure).
"""

OUTCOME = {
    "ready": "ready",
    "crashed": "crashed",
    "stopped": "stopped",
    "hung": "running",
    "unknown": "running",
}
"""Label outcome -> replay outcome (a hang is only visible over time; see tests/golden/README)."""

LABEL_KEYS = {
    "furthest_phase": "furthest_phase",
    "outcome": "outcome",
    "crash_cause": "crash_cause",
    "root_cause_exception": "root_cause_exception",
    "root_cause_exception_prefix": "root_cause_exception",
    "vllm_version": "vllm_version",
    "tensor_parallel_size": "tp",
}
"""``expect`` key -> the label it is mapped from."""


@cache
def _labels_table(name: str) -> dict[str, dict[str, str]]:
    """A set's LABELS.md rows by file name, cells unescaped (``\\|`` -> ``|``)."""
    rows: dict[str, dict[str, str]] = {}
    for line in (SETS[name] / "LABELS.md").read_text().splitlines():
        if not re.match(r"^\| \d{3}-", line):
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == len(LABEL_COLUMNS), line[:80]
        row = dict(zip(LABEL_COLUMNS, cells, strict=True))
        rows[row["file"]] = row
    return rows


def _expected(log: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(log.with_suffix(".expected.json").read_text())
    return document


def _origin(source: str) -> str:
    """Where a log comes from: a committed file's repository, or an issue thread's URL."""
    url = source.split(" ", maxsplit=1)[0]
    match = re.match(r"https://github\.com/([^/]+/[^/]+)/blob/", url)
    return match.group(1) if match else url


@cache
def _score(name: str) -> Score:
    return score_directory(SETS[name])


class TestLabels:
    """The data agree with themselves: one row per log, labels verbatim, expect maps the labels."""

    @pytest.mark.parametrize("name", sorted(SETS))
    def test_every_log_has_its_expected_file_and_one_labels_row(self, name: str) -> None:
        table = _labels_table(name)
        assert len(LOGS[name]) >= MINIMUM[name]
        assert sorted(table) == [log.name for log in LOGS[name]]
        for log in LOGS[name]:
            assert log.with_suffix(".expected.json").is_file(), log.name

    def test_no_two_logs_share_a_repository_or_an_issue_thread(self) -> None:
        """Across all sets: a log from a thread or repository already used measures less."""
        origins = [_origin(row["source"]) for name in SETS for row in _labels_table(name).values()]
        assert sorted(origin for origin in set(origins) if origins.count(origin) > 1) == []

    def test_no_log_shares_a_repository_or_an_issue_thread_with_the_golden_corpus(self) -> None:
        """The labelled sets judge the engine on logs outside the corpus it was built on."""
        corpus = {
            _origin(json.loads(path.read_text())["source"])
            for path in sorted(CORPUS.glob("*.expected.json"))
        }
        assert len(corpus) >= 40
        origins = {_origin(row["source"]) for name in SETS for row in _labels_table(name).values()}
        assert sorted(origins & corpus) == []

    @pytest.mark.parametrize(("name", "log"), ALL_LOGS, ids=ALL_IDS)
    def test_expected_file_repeats_the_labels_row(self, name: str, log: Path) -> None:
        """``labels`` are LABELS.md's cells verbatim; ``file`` and ``source`` likewise."""
        row = _labels_table(name)[log.name]
        document = _expected(log)
        assert document["file"] == log.name
        assert document["source"] == row["source"]
        assert document["labels"] == {column: row[column] for column in LABEL_COLUMNS[2:8]}

    @pytest.mark.parametrize(("name", "log"), ALL_LOGS, ids=ALL_IDS)
    def test_expect_holds_only_confident_labels_mapped_to_engine_values(
        self, name: str, log: Path
    ) -> None:
        document = _expected(log)
        labels: dict[str, str] = document["labels"]
        expect: dict[str, Any] = document["expect"]
        assert set(expect) <= set(KEYS)
        assert not {"root_cause_exception", "root_cause_exception_prefix"} <= set(expect)
        for key, value in expect.items():
            label = labels[LABEL_KEYS[key]]
            assert "?" not in label.split(" (")[0], f"{key}: uncertain label {label!r}"
            if key == "furthest_phase":
                assert value == label
            elif key == "outcome":
                assert value == OUTCOME[label]
            elif key == "crash_cause":
                assert value == (None if label.startswith("-") else CrashCause(label).value)
            elif key == "tensor_parallel_size":
                assert label.split(" ")[0] == str(value)
            elif key == "vllm_version":
                assert label.split(" ")[0] == value
            elif "mapping_note" not in document:
                assert label.startswith(value), f"{key}: {value!r} is not the label's text"


class TestScorer:
    """The comparison itself, on copies with answers known to be wrong or right."""

    def _copy(self, tmp_path: Path, expect: dict[str, Any]) -> Path:
        source = LOGS["validation"][0]
        target = tmp_path / source.name
        shutil.copyfile(source, target)
        target.with_suffix(".expected.json").write_text(json.dumps({"expect": expect}))
        return target

    def test_a_wrong_label_is_one_miss_with_expected_and_got(self, tmp_path: Path) -> None:
        """Values no engine can produce: each is one miss, reported with both sides."""
        log = self._copy(tmp_path, {"outcome": "no-such-outcome", "tensor_parallel_size": -1})
        result = score_log(log)
        assert result.keys == ("outcome", "tensor_parallel_size")
        assert [(miss.key, miss.expected) for miss in result.misses] == [
            ("outcome", "no-such-outcome"),
            ("tensor_parallel_size", -1),
        ]
        assert all(miss.got not in ("no-such-outcome", -1) for miss in result.misses)
        assert (result.labels, result.right) == (2, 0)

    def test_exact_and_prefix_comparisons(self) -> None:
        line = "ValueError: No available memory for the cache blocks. Try increasing it"
        assert matches("root_cause_exception", line, line)
        assert not matches("root_cause_exception", line[:20], line)
        assert matches("root_cause_exception_prefix", line[:20], line)
        assert not matches("root_cause_exception_prefix", line[:20], None)
        assert matches("crash_cause", None, None)
        assert not matches("crash_cause", None, "unknown")
        assert not matches("tensor_parallel_size", 2, "2")

    def test_a_file_without_a_unit_gets_every_label_wrong(self, tmp_path: Path) -> None:
        log = tmp_path / "900-empty.log"
        log.write_bytes(b"")
        log.with_suffix(".expected.json").write_text(
            json.dumps({"expect": {"outcome": "crashed", "crash_cause": "unknown"}})
        )
        result = score_log(log)
        assert [(miss.key, miss.got) for miss in result.misses] == [
            ("outcome", "0 units"),
            ("crash_cause", "0 units"),
        ]

    def test_an_unknown_expect_key_is_an_error_not_a_silent_skip(self, tmp_path: Path) -> None:
        log = self._copy(tmp_path, {"phase": "ready"})
        with pytest.raises(KeyError, match="unknown expect keys"):
            score_log(log)


class TestLabelledSets:
    """Replay every log of each set; print the table; hold the issue's bar."""

    @pytest.mark.parametrize("name", sorted(SETS))
    def test_engine_never_raises_on_any_log(self, name: str) -> None:
        score = _score(name)
        raised = [f"{log.file}: {log.error}" for log in score.errors]
        assert raised == [], "\n".join(raised)

    @pytest.mark.parametrize("name", sorted(set(SETS) - set(BELOW_BAR)))
    def test_score_of_confident_labels_reaches_the_bar(self, name: str) -> None:
        score = _score(name)
        report = format_report(score, bar=BAR)
        print(report)
        assert score.labels >= MINIMUM_LABELS[name]
        assert score.ratio >= BAR, f"{name}: score {score.ratio:.1%} below {BAR:.0%}\n{report}"

    @pytest.mark.parametrize("name", sorted(SETS))
    def test_no_set_scores_worse_than_recorded(self, name: str) -> None:
        """The bar alone let a set slip from 100 to 99 of 100 unseen: each set keeps its score."""
        score = _score(name)
        assert score.right >= RECORDED[name], (
            f"{name}: {score.right} right, recorded {RECORDED[name]}\n"
            f"{format_report(score, bar=BAR)}"
        )

    @pytest.mark.parametrize("name", sorted(BELOW_BAR))
    def test_score_below_the_bar_is_no_worse_than_its_first_run(self, name: str) -> None:
        """Not held to the bar (see ``BELOW_BAR``): printed, and never below its recorded run."""
        score = _score(name)
        report = format_report(score, bar=BAR)
        print(report)
        assert score.labels >= MINIMUM_LABELS[name]
        floor = BELOW_BAR[name]
        if floor is None:
            pytest.skip(
                f"{name}: first run not recorded yet (BELOW_BAR); the table is printed above"
            )
        assert score.right >= floor, f"{name}: worse than its first run\n{report}"
