"""One-shot replay: byte streams → decoder → trackers → snapshots (core: pure, no asyncio).

The command-line edge opens the files; this module only sees iterables of byte chunks, so
tests and benchmarks drive it directly.

At the end of input each unit is judged as the daemon would at the time of its last record:
its startup history is the incarnations of the same input that reached ready, against which
a current start gets its usual phase duration, the slow flag and its ETA (``eta``, ``stall``).
"""

from __future__ import annotations

import codecs
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from vllm_sentinel.engine.catalog.causes import DEFAULT_BENIGN_PATTERNS, BenignMatcher
from vllm_sentinel.engine.catalog.markers import MarkerMatcher
from vllm_sentinel.engine.catalog.phases import Outcome
from vllm_sentinel.engine.decode.journal_json import JournalJsonDecoder
from vllm_sentinel.engine.decode.line_buffer import NulGaps
from vllm_sentinel.engine.decode.text_log import TextLogDecoder
from vllm_sentinel.engine.eta import (
    estimate_ready,
    remember,
    same_model,
    startup_record,
    usual_phase_seconds,
    will_time_out,
)
from vllm_sentinel.engine.snapshot import StartupRecord, UnitSnapshot
from vllm_sentinel.engine.stall import is_slow
from vllm_sentinel.engine.tracker import TrackerSet, UnitTracker
from vllm_sentinel.sources.replay_input import InputError

__all__ = [
    "AHEAD_OF_UTC",
    "KEPT_INCARNATIONS",
    "InputFormat",
    "ReplayResult",
    "detect_format",
    "judge_at_end",
    "replay",
]

KEPT_INCARNATIONS = 8
"""How many of a unit's newest incarnations replay shows whole by default (``--last``)."""

AHEAD_OF_UTC = timedelta(hours=14)
"""How far a host's local time can be ahead of UTC (UTC+14, Kiribati's Line Islands): a stamp
without a year or zone printed at the moment of a replay reads up to this much after its UTC
``now``, and is not in the future."""


class InputFormat(StrEnum):
    """What a replay input holds."""

    AUTO = "auto"
    JSON = "json"  # journalctl -o json
    TEXT = "text"  # anything else


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Units found in the input, what could not be read, and what the reader should know
    (``warnings``: one sentence each, e.g. a plain-text log that mixes several units)."""

    units: tuple[UnitSnapshot, ...]
    skipped: Counter[str] = field(default_factory=Counter)
    repaired: Counter[str] = field(default_factory=Counter)
    lines: int = 0
    warnings: tuple[str, ...] = ()


def detect_format(head: bytes) -> InputFormat:
    """Guess the format from the first bytes: a JSON object with journal fields, or text."""
    for line in head.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(b"{") and (b'"MESSAGE"' in stripped or b'"__CURSOR"' in stripped):
            return InputFormat.JSON
        return InputFormat.TEXT
    return InputFormat.TEXT


def judge_at_end(unit: UnitSnapshot) -> UnitSnapshot:
    """``unit`` with its usual phase duration, slow flag and ETA at its last record's time.

    The history is the unit's earlier incarnations that reached ready; only a current start
    that is still running is judged (stalls need wall-clock time, so replay does not judge
    them).
    """
    current = unit.current
    now = current.last_record_at if current is not None else None
    if current is None or now is None or current.outcome is not Outcome.RUNNING:
        return unit
    records: tuple[StartupRecord, ...] = ()
    for item in unit.incarnations[:-1]:
        record = startup_record(item)
        if record is not None:
            records = remember(records, record) or records
    usual = usual_phase_seconds(
        same_model(records, current.model, current.modes.startup_kind), current.phase
    )
    # a phase a line said ended (markers.PHASE_ENDS) is over: the next one is under way
    slow = current.phase_ended_at is None and is_slow(
        current.phase, current.phase_entered_at, usual, now
    )
    estimate = estimate_ready(current, records, now)
    expected = (
        estimate.expected_ready_at
        if estimate is not None and estimate.eta_seconds is not None
        else None
    )
    times_out, timeout, remaining = will_time_out(
        current, expected, now, unit.ready_timeout_seconds
    )
    if estimate is None and usual is None:
        return unit
    return replace(
        unit,
        will_time_out=times_out,
        ready_timeout_seconds=timeout,
        ready_timeout_remaining_seconds=remaining,
        slow=slow,
        usual_phase_seconds=usual,
        eta_seconds=estimate.eta_seconds if estimate is not None else None,
        expected_ready_at=(
            estimate.expected_ready_at
            if estimate is not None and estimate.eta_seconds is not None
            else None
        ),
        eta_basis=estimate.basis if estimate is not None else None,
        eta_overdue_seconds=estimate.overdue_seconds if estimate is not None else None,
    )


def _as_utf8(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The input's bytes as UTF-8: a UTF-8 byte-order mark dropped, UTF-16 with its mark
    (Windows PowerShell's ``Out-File``) re-encoded chunk by chunk; anything else unchanged."""
    iterator = iter(chunks)
    first = b""
    for chunk in iterator:
        first += chunk
        if len(first) >= 4:
            break
    if first.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        decoder = codecs.getincrementaldecoder("utf-16")("replace")
        yield decoder.decode(first).encode("utf-8")
        for chunk in iterator:
            yield decoder.decode(chunk).encode("utf-8")
        yield decoder.decode(b"", final=True).encode("utf-8")
        return
    if first:
        yield first.removeprefix(codecs.BOM_UTF8)
    yield from iterator


def replay(
    inputs: Iterable[Iterable[bytes]],
    *,
    input_format: InputFormat = InputFormat.AUTO,
    unit: str | None = None,
    names: Sequence[str] | None = None,
    reference_year: int = 1970,
    now: datetime | None = None,
    benign_patterns: Sequence[str] = DEFAULT_BENIGN_PATTERNS,
    keep: int | None = KEPT_INCARNATIONS,
    labels: Sequence[str] | None = None,
) -> ReplayResult:
    """Run inputs through the engine and return every unit's final snapshot.

    Args:
        inputs: one iterable of byte chunks per input (a file, stdin).
        input_format: ``AUTO`` decides per input from its first chunk.
        unit: for journal JSON, keep only units matching this name or glob; for text, the
            unit name to report (default ``vllm``).
        names: one name per input (file names); with several text inputs and no ``unit``,
            each text input is its own unit, named after its input, so that unrelated logs
            never merge into one timeline.
        reference_year: year for timestamps that carry none.
        now: when the replay runs: a timestamp without a year is never put after it (the
            latest year that keeps it at or before ``now`` plus ``AHEAD_OF_UTC``, since such a
            stamp is its host's local time, whose zone the text does not say); ``None``: the
            reference year whatever it gives (tests, benchmarks).
        benign_patterns: regexes of ERROR lines known not to be fatal.
        keep: how many of each unit's newest incarnations to keep whole (at least 2); the
            earlier ones are summed up (``UnitSnapshot.earlier``); ``None`` keeps every one.
        labels: how an error names each input (the paths as given; default ``names``).

    Raises:
        InputError: an input read as journal JSON (``input_format=JSON``) in which no line is
            a JSON object (plain text given ``--format json``).

    Returns:
        The snapshots (at the end of input: pending crashes confirmed, all crashes settled;
        a start still running judged by ``judge_at_end``), without units in which no line
        looked like vLLM's or systemd's.
    """
    matcher = MarkerMatcher()
    benign = BenignMatcher(benign_patterns)
    not_after = now + AHEAD_OF_UTC if now is not None else None
    text_unit = unit or "vllm"

    def factory(name: str, host: str | None) -> UnitTracker:
        return UnitTracker(
            name,
            host,
            matcher=matcher,
            benign=benign,
            reference_year=reference_year,
            not_after=not_after,
            max_incarnations=sys.maxsize if keep is None else keep,
            settle_while_feeding=False,  # a post-mortem settles at the end of its input
        )

    trackers = TrackerSet((unit,) if unit else (), default_unit=text_unit, factory=factory)
    skipped: Counter[str] = Counter()
    repaired: Counter[str] = Counter()
    lines = 0
    gaps = NulGaps()
    text_units: set[str] = set()  # the names text inputs were read under (plain text names none)
    local_units: set[str] = set()  # … whose times are the host's local time, as printed
    for index, chunks in enumerate(inputs):
        decoder: JournalJsonDecoder | TextLogDecoder | None = None
        records = 0
        input_unit = text_unit
        if unit is None and names is not None and len(names) > 1:
            input_unit = names[index]
        for chunk in gaps.close(_as_utf8(chunks)):
            if decoder is None:
                chosen = (
                    input_format if input_format is not InputFormat.AUTO else detect_format(chunk)
                )
                decoder = (
                    JournalJsonDecoder()
                    if chosen is InputFormat.JSON
                    else TextLogDecoder(
                        input_unit, reference_year=reference_year, not_after=not_after
                    )
                )
            decoded = decoder.feed(chunk)
            records += len(decoded)
            trackers.feed_many(decoded)
        if decoder is None:
            continue
        decoded = decoder.flush()
        trackers.feed_many(decoded)
        if (
            isinstance(decoder, JournalJsonDecoder)
            and not records + len(decoded)
            and decoder.skipped.get("invalid_json", 0) > 0
        ):
            label = labels or names
            raise InputError(
                label[index] if label is not None else "input",
                "not journal JSON (journalctl -o json): no line is a JSON object; read it as "
                "text with --format text (or auto)",
            )
        skipped.update(decoder.skipped)
        if isinstance(decoder, TextLogDecoder):
            repaired.update(decoder.repaired)
            text_units.add(input_unit)
            if decoder.times_as_printed:
                local_units.add(input_unit)
        lines += decoder.lines_total
    units = []
    warnings: list[str] = []
    if gaps.runs:
        warnings.append(
            f"{gaps.bytes_total:,} NUL bytes in {gaps.runs} run{'s' if gaps.runs > 1 else ''} "
            "were read as a gap in the text (a file truncated while its writer kept writing, "
            "e.g. logrotate's copytruncate)"
        )
    for tracker in trackers:
        tracker.finish()
        if not tracker.recognized_lines:
            continue
        snapshot = judge_at_end(tracker.snapshot())
        named = [name for name in tracker.manager_units if name != tracker.unit]
        if tracker.unit in text_units:
            # a placeholder name (``vllm``, the input's file name) unless the user gave it
            snapshot = replace(
                snapshot,
                unit_name_known=unit is not None,
                log_times_local=tracker.unit in local_units,
            )
        if unit is None and tracker.unit == text_unit and named:
            if len(named) == 1:
                # plain text names no unit, but systemd's lines in it name exactly one
                snapshot = replace(snapshot, unit=named[0], unit_name_known=True)
            else:
                warnings.append(
                    f"the text names several units ({', '.join(named)}) and plain text "
                    "cannot tell their lines apart: they are read as one unit; replay "
                    "`journalctl -o json` output to see each unit on its own"
                )
        units.append(snapshot)
    if unit is not None and not units and (others := trackers.passed_over()):
        warnings.append(f"no unit matches {unit!r}; the input holds {', '.join(others)}")
    units.sort(key=lambda snapshot: (snapshot.host or "", snapshot.unit))
    return ReplayResult(tuple(units), skipped, repaired, lines, tuple(warnings))
