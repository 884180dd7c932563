"""Score the engine on labelled real logs: the labelled sets of issues 10 and 19.

A *labelled set* is a directory of ``tests/golden`` named in ``SETS``: ``validation`` (the first
set, since used to improve the engine), ``holdout`` (the second, read miss by miss since),
``fresh`` (the third, read miss by miss after its first run), ``fresh2`` (the fourth, issue
19's held-out logs, mostly crashes: never used to change the engine, so it measures how root
causes generalise) and ``fresh3`` (the fifth, issue 19's second held-out set of crashes, built
the same way, not run yet). A *labelled log* is ``NNN-slug.log`` with ``NNN-slug.expected.json``
beside it (the shape of ``tests/golden/logs/*.expected.json``). Only the keys of ``expect`` are scored,
each one label:

- ``furthest_phase``: the furthest phase over all incarnations of the unit;
- ``outcome``: the last (current) incarnation's outcome;
- ``crash_cause``: the cause of the last crash in the file, ``null`` when no incarnation crashed;
- ``root_cause_exception`` / ``root_cause_exception_prefix``: that crash's ``Class: message``,
  equal to / starting with the expected text;
- ``vllm_version``, ``tensor_parallel_size``: the current incarnation's.

Each log is replayed alone, as the golden tests do (``replay_file``: ``replay([[bytes]],
reference_year=2026)``).
A log on which the engine raises, or that yields no unit or several units, gets every one of its
labels counted wrong (``got`` says why): the file is one unit of one host.

The data are the JSON files; nothing here knows a file by name.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_sentinel.engine.catalog.phases import PHASE_ORDER
from vllm_sentinel.engine.snapshot import CrashInfo, UnitSnapshot
from vllm_sentinel.replay import replay

__all__ = [
    "BAR",
    "KEYS",
    "LABEL_COLUMNS",
    "REFERENCE_YEAR",
    "SETS",
    "LogScore",
    "Miss",
    "Score",
    "exception_line",
    "format_report",
    "last_crash",
    "matches",
    "replay_file",
    "score_directory",
    "score_log",
]

# the columns of a LABELS.md row (../shared/corpus and every labelled set here)
LABEL_COLUMNS = (
    "file",
    "source",
    "vllm_version",
    "tp",
    "furthest_phase",
    "outcome",
    "crash_cause",
    "root_cause_exception",
    "notes",
)

KEYS = (
    "furthest_phase",
    "outcome",
    "crash_cause",
    "root_cause_exception",
    "root_cause_exception_prefix",
    "vllm_version",
    "tensor_parallel_size",
)
"""The ``expect`` keys that are scored, in report order."""

REFERENCE_YEAR = 2026

BAR = 0.95
"""Issue 10: a labelled set scores at least 95 % of its confident labels."""

SETS = {
    name: Path(__file__).parent / name
    for name in ("validation", "holdout", "fresh", "fresh2", "fresh3")
}
"""The labelled sets by name -> their directory (``NNN-slug.log``, ``.expected.json``, LABELS.md)."""


@dataclass(frozen=True)
class Miss:
    """One confident label the engine got wrong."""

    file: str
    key: str
    expected: Any
    got: Any


@dataclass
class LogScore:
    """The result for one log: labels scored, misses, and the engine's error if it raised."""

    file: str
    keys: tuple[str, ...] = ()
    misses: list[Miss] = field(default_factory=list)
    error: str | None = None

    @property
    def labels(self) -> int:
        return len(self.keys)

    @property
    def right(self) -> int:
        return self.labels - len(self.misses)


@dataclass
class Score:
    """The result for a whole directory of labelled logs."""

    logs: list[LogScore]

    @property
    def labels(self) -> int:
        return sum(log.labels for log in self.logs)

    @property
    def wrong(self) -> int:
        return sum(len(log.misses) for log in self.logs)

    @property
    def right(self) -> int:
        return self.labels - self.wrong

    @property
    def ratio(self) -> float:
        return self.right / self.labels if self.labels else 0.0

    @property
    def errors(self) -> list[LogScore]:
        return [log for log in self.logs if log.error is not None]

    def per_key(self) -> dict[str, tuple[int, int]]:
        """``key -> (right, total)`` over all logs, for the keys that occur."""
        totals: Counter[str] = Counter()
        wrong: Counter[str] = Counter()
        for log in self.logs:
            totals.update(log.keys)
            wrong.update(miss.key for miss in log.misses)
        return {key: (totals[key] - wrong[key], totals[key]) for key in KEYS if totals[key]}


def replay_file(path: Path) -> tuple[UnitSnapshot, ...]:
    """Replay one log file alone, as the golden tests and the scorer do."""
    return replay([[path.read_bytes()]], reference_year=REFERENCE_YEAR).units


def last_crash(unit: UnitSnapshot) -> CrashInfo | None:
    """The crash of the unit's latest incarnation that crashed (``None``: none did)."""
    for incarnation in reversed(unit.incarnations):
        if incarnation.crash is not None:
            return incarnation.crash
    return None


def exception_line(crash: CrashInfo) -> str:
    """The root cause as labelled: ``Class: message``, or the message without a class."""
    return f"{crash.exception}: {crash.message}" if crash.exception else crash.message


def _actual(unit: UnitSnapshot, key: str) -> Any:
    """What the engine says for one ``expect`` key (``None`` where it has nothing)."""
    current = unit.current
    crash = last_crash(unit)
    if key == "furthest_phase":
        phases = [item.furthest_phase for item in unit.incarnations]
        return max(phases, key=PHASE_ORDER.index).value if phases else None
    if key == "outcome":
        return current.outcome.value if current is not None else None
    if key == "crash_cause":
        return crash.cause.value if crash is not None else None
    if key in ("root_cause_exception", "root_cause_exception_prefix"):
        return exception_line(crash) if crash is not None else None
    if key == "vllm_version":
        return current.vllm_version if current is not None else None
    if key == "tensor_parallel_size":
        return current.tensor_parallel_size if current is not None else None
    raise KeyError(f"unknown expect key {key!r}")


def matches(key: str, expected: Any, got: Any) -> bool:
    """Whether the engine's ``got`` satisfies the label ``expected`` for ``key``."""
    if key == "root_cause_exception_prefix":
        return isinstance(got, str) and got.startswith(expected)
    return bool(got == expected)


def score_log(log: Path) -> LogScore:
    """Replay one labelled log and compare every key of its ``expect``.

    Returns:
        The log's score: the keys scored, the misses, the engine's error if it raised.

    Raises:
        FileNotFoundError: the ``.expected.json`` beside the log is missing.
        KeyError: ``expect`` has a key this scorer does not know.
    """
    expect: dict[str, Any] = json.loads(log.with_suffix(".expected.json").read_text())["expect"]
    unknown = sorted(set(expect) - set(KEYS))
    if unknown:
        raise KeyError(f"{log.name}: unknown expect keys {unknown}")
    keys = tuple(key for key in KEYS if key in expect)
    result = LogScore(file=log.name, keys=keys)
    try:
        units = replay_file(log)
    except Exception as error:  # the set's point is to find these
        result.error = f"{type(error).__name__}: {error}"
        result.misses = [Miss(log.name, key, expect[key], f"raised {result.error}") for key in keys]
        return result
    if len(units) != 1:
        got = f"{len(units)} units"
        result.misses = [Miss(log.name, key, expect[key], got) for key in keys]
        return result
    (unit,) = units
    for key in keys:
        got = _actual(unit, key)
        if not matches(key, expect[key], got):
            result.misses.append(Miss(log.name, key, expect[key], got))
    return result


def score_directory(directory: Path) -> Score:
    """Score every ``*.log`` of ``directory`` that has an ``.expected.json`` (sorted by name)."""
    return Score(logs=[score_log(log) for log in sorted(directory.glob("*.log"))])


def _short(value: Any, width: int = 110) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_report(score: Score, *, bar: float) -> str:
    """The per-log table, the totals (overall and per key) and every miss, as plain text."""
    width = max((len(log.file) for log in score.logs), default=10)
    lines = [f"{'file':<{width}}  right/labels  missed", "-" * (width + 30)]
    for log in score.logs:
        missed = ", ".join(miss.key for miss in log.misses)
        if log.error is not None:
            missed = f"RAISED {log.error}"
        lines.append(f"{log.file:<{width}}  {log.right:>5}/{log.labels:<6}  {missed}")
    lines += [
        "",
        f"logs: {len(score.logs)}  labels: {score.labels}  right: {score.right}  "
        f"wrong: {score.wrong}  score: {score.ratio:.1%}  (bar: {bar:.0%})",
        "per key:",
    ]
    lines += [f"  {key:<28} {right}/{total}" for key, (right, total) in score.per_key().items()]
    if score.wrong:
        lines.append("misses (file, key, expected, got):")
        for log in score.logs:
            for miss in log.misses:
                lines.append(f"  {miss.file}  {miss.key}")
                lines.append(f"      expected {_short(miss.expected)}")
                lines.append(f"      got      {_short(miss.got)}")
    return "\n".join(lines)
