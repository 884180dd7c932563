"""Hostile and broken input for the property tests, the fuzz target and the soak test.

* ``CORPUS`` — real vLLM lines (the golden journal's messages and the marker examples) and
  systemd's messages about a unit, so that generated input reaches the tracker's decisions;
* hypothesis strategies: ``json_values`` (any JSON type), ``journal_entries`` (every field may
  hold any JSON type), ``hostile_text`` (control characters, ANSI, ``\\r``, NUL, huge runs),
  ``engine_records`` (records as journald would give them, with times that jump anywhere);
* ``tracker_sizes`` / ``assert_tracker_bounded`` — the size of every buffer a ``UnitTracker``
  keeps, so a test can say "memory is bounded" as a fact about the data structures;
* ``journal_cycle`` — corpus-shaped ``journalctl -o json`` lines of one incarnation (start,
  load, crash, restart), with fresh cursors, times and invocation ids, for the soak test.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from vllm_sentinel.engine.catalog.phases import Phase
from vllm_sentinel.engine.decode.record import Record
from vllm_sentinel.engine.tracker import UnitTracker

__all__ = [
    "CORPUS",
    "FAR_FUTURE",
    "FAR_PAST",
    "JOURNAL_FIELDS",
    "PROPERTY",
    "SYSTEMD_MESSAGES",
    "T0",
    "UNIT",
    "assert_tracker_bounded",
    "chunk",
    "engine_records",
    "hostile_text",
    "journal_cycle",
    "journal_entries",
    "json_values",
    "tracker_sizes",
]

_TESTS = Path(__file__).resolve().parent.parent
_GOLDEN_JOURNAL = _TESTS / "golden" / "journal" / "001-kimi-k25-flashinfer-restart.jsonl"
_MARKER_EXAMPLES = _TESTS / "unit" / "marker_examples.tsv"

UNIT = "vllm-kimi-k25.service"
T0 = datetime(2026, 11, 28, 23, 35, 0, tzinfo=UTC)
FAR_FUTURE = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
FAR_PAST = datetime(1, 1, 1, 0, 0, 1, tzinfo=UTC)

PROPERTY = settings(
    max_examples=int(
        os.environ.get(
            "SENTINEL_PROPERTY_EXAMPLES", "300" if os.environ.get("CI") == "true" else "60"
        )
    ),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Hypothesis settings of the property tests: 60 examples locally, 300 in CI
(``SENTINEL_PROPERTY_EXAMPLES`` overrides both); no deadline (CI machines vary)."""

JOURNAL_FIELDS: tuple[str, ...] = (
    "MESSAGE",
    "__CURSOR",
    "__REALTIME_TIMESTAMP",
    "_PID",
    "PRIORITY",
    "_SYSTEMD_UNIT",
    "_SYSTEMD_USER_UNIT",
    "_SYSTEMD_INVOCATION_ID",
    "UNIT",
    "USER_UNIT",
    "INVOCATION_ID",
    "USER_INVOCATION_ID",
    "SYSLOG_IDENTIFIER",
    "_COMM",
    "MESSAGE_ID",
    "_TRANSPORT",
)
"""Every field ``JournalJsonDecoder`` reads."""

SYSTEMD_MESSAGES: tuple[tuple[str, str | None], ...] = (
    (f"Starting {UNIT} - vLLM Kimi K2.5...", "7d4958e842da4a758f6c1cdc7b36dcc5"),
    (f"Started {UNIT} - vLLM Kimi K2.5.", "39f53479d3a045ac8e11786248231fbf"),
    (f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", None),
    (f"{UNIT}: Main process exited, code=killed, status=9/KILL", None),
    (f"{UNIT}: Main process exited, code=exited, status=0/SUCCESS", None),
    (f"{UNIT}: Failed with result 'exit-code'.", None),
    (f"{UNIT}: Failed with result 'oom-kill'.", None),
    (f"{UNIT}: Failed with result 'timeout'.", None),
    (f"{UNIT}: A process of this unit has been killed by the OOM killer.", None),
    (f"{UNIT}: Start operation timed out. Terminating.", None),
    (f"{UNIT}: Scheduled restart job, restart counter is at 3.", None),
    (f"{UNIT}: Deactivated successfully.", None),
    (f"Stopping {UNIT} - vLLM Kimi K2.5...", "de5b426a63be47a7b6ac3eaac82e2f6f"),
    (f"Stopped {UNIT} - vLLM Kimi K2.5.", "9d1aaa27d60140bd96365438aad20286"),
    (f"Failed to start {UNIT}.", None),
    ("-- Boot 5b3a1c0d9e8f47a6b2c4d6e8f0a1b3c5 --", None),
    ("Out of memory: Killed process 4242 (python3)", None),
)
"""What systemd (and the kernel) write about a unit, with MESSAGE_IDs where they have one."""


@cache
def _golden_entries() -> tuple[dict[str, object], ...]:
    return tuple(orjson.loads(line) for line in _GOLDEN_JOURNAL.read_bytes().splitlines())


@cache
def _corpus() -> tuple[str, ...]:
    lines: list[str] = []
    for entry in _golden_entries():
        message = entry.get("MESSAGE")
        if isinstance(message, list):
            message = bytes(message).decode("utf-8", "replace")
        if isinstance(message, str) and entry.get("_PID") != "1":
            lines.append(message)
    for row in _MARKER_EXAMPLES.read_text(encoding="utf-8").splitlines():
        if row.startswith("#") or row.count("\t") < 2:
            continue
        text = row.split("\t", 2)[2]
        lines.append(text.replace("\\r", "\r").replace("\\x1b", "\x1b"))
    lines += [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/vllm/worker.py", line 783, in worker_main',
        "    self.worker.load_model()",
        "RuntimeError: CUDA error: out of memory",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
        "Process EngineCore_DP0:",
        "ERROR 11-29 10:00:40 [core.py:700] EngineCore failed to start.",
    ]
    return tuple(dict.fromkeys(lines))


CORPUS: tuple[str, ...] = _corpus()
"""Real vLLM log lines (without journald's wrapper), tracebacks included."""


def chunk(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``data`` at the given offsets (any order, any range: they are folded in)."""
    if not data:
        return [data]
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [data]


# --- strategies ----------------------------------------------------------------------------

_CONTROL = "\x00\x01\x07\x08\x0b\x0c\x1b\x7f\r\n\t\u2028\ufeff\ud7ff\U0010ffff"
_ESCAPES = (
    "\x1b[1;36m",
    "\x1b[0;0m",
    "\x1b[999999999999;99999999999H",
    "\x1b]0;title\x07",
    "\x1b]8;;http://evil\x1b\\",
    "\x1b]unterminated osc",
    "\x1b[",
    "\x1b(B",
    "\x1bP+q\x1b\\",
    "\x9b31m",
    "\r",
    "\r" * 50,
    "\x00",
    "\n",
)

hostile_text = st.one_of(
    st.text(st.characters(codec="utf-8") | st.sampled_from(_CONTROL), max_size=200),
    st.lists(st.sampled_from(_ESCAPES) | st.sampled_from(CORPUS), max_size=12).map("".join),
    st.builds(
        lambda escape, line, at: line[:at] + escape + line[at:],
        st.sampled_from(_ESCAPES),
        st.sampled_from(CORPUS),
        st.integers(0, 200),
    ),
)
"""Text a hostile or broken process may log: controls, escapes, ``\\r`` runs, corpus mixes."""

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50)
    | st.lists(st.integers(-300, 300), max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value orjson can write: what a field may hold when it holds the wrong type."""

_GOOD_FIELD = {
    "MESSAGE": st.sampled_from(CORPUS) | hostile_text,
    "__CURSOR": st.integers(0, 2**40).map(lambda i: f"s=00ff;i={i:x};b=0;m=0;t=0;x=0"),
    "__REALTIME_TIMESTAMP": st.integers(-(2**62), 2**63).map(str),
    "_PID": st.integers(0, 2**31).map(str),
    "PRIORITY": st.integers(0, 7).map(str),
    "_SYSTEMD_UNIT": st.sampled_from([UNIT, "init.scope", "vllm-other.service"]),
    "UNIT": st.sampled_from([UNIT, "vllm-other.service"]),
    "_SYSTEMD_INVOCATION_ID": st.sampled_from(["a" * 32, "b" * 32, "c" * 32]),
    "INVOCATION_ID": st.sampled_from(["a" * 32, "b" * 32, "c" * 32]),
    "SYSLOG_IDENTIFIER": st.sampled_from(["systemd", "python3", "kernel", "bash"]),
    "_COMM": st.sampled_from(["systemd", "python3", "vllm"]),
    "MESSAGE_ID": st.sampled_from([mid for _, mid in SYSTEMD_MESSAGES if mid]),
    "_TRANSPORT": st.sampled_from(["stdout", "journal", "kernel", "syslog"]),
}


def _field(name: str) -> st.SearchStrategy[object]:
    good = _GOOD_FIELD.get(name, st.text(max_size=40))
    as_bytes = good.map(lambda v: list(str(v).encode("utf-8", "surrogatepass")))
    return st.one_of(good, good, as_bytes, json_values)


journal_entries = st.fixed_dictionaries(
    {}, optional={name: _field(name) for name in JOURNAL_FIELDS}
)
"""A ``journalctl -o json`` object where each field is missing, right, bytes or any JSON type."""


def _clamp(moment: datetime, seconds: float) -> datetime:
    try:
        moved = moment + timedelta(seconds=seconds)
    except OverflowError:
        return FAR_FUTURE if seconds > 0 else FAR_PAST
    return min(max(moved, FAR_PAST), FAR_FUTURE)


_STEP = st.one_of(
    st.floats(0, 120),
    st.floats(0, 120),
    st.floats(-86_400 * 400, 86_400 * 400),
    st.sampled_from([1e12, -1e12]),  # to the far future or past (clamped to year 1 / 9999)
)


@st.composite
def engine_records(draw: st.DrawFn, max_size: int = 60) -> list[Record]:
    """Records of one unit as the journal would give them, each with a fresh cursor.

    Messages come from the corpus, systemd's messages, tracebacks and hostile text; times
    move forward, jump back, vanish (``None``) or go to year 1 or 9999; invocation ids and
    PIDs come from small pools so that incarnations and processes interleave.
    """
    count = draw(st.integers(0, max_size))
    seqnum = draw(st.integers(0, 2**32))
    time = T0
    records: list[Record] = []
    for _ in range(count):
        time = _clamp(time, draw(_STEP))
        realtime = None if draw(st.integers(0, 9)) == 0 else time
        invocation = draw(st.sampled_from([None, "a" * 32, "b" * 32, "c" * 32, "d" * 32]))
        seqnum += 1
        cursor = f"s=00ff;i={seqnum:x};b=0;m=0;t=0;x=0"
        kind = draw(st.integers(0, 9))
        if kind <= 1:
            message, message_id = draw(st.sampled_from(SYSTEMD_MESSAGES))
            records.append(
                Record(
                    message,
                    realtime,
                    "h",
                    UNIT,
                    invocation,
                    1,
                    "systemd",
                    6,
                    cursor,
                    message_id,
                    True,
                )
            )
            continue
        if kind <= 6:
            message = draw(st.sampled_from(CORPUS))
        elif kind == 7:
            message = "\n".join(draw(st.lists(st.sampled_from(CORPUS), min_size=2, max_size=6)))
        else:
            message = draw(hostile_text)
        pid = draw(st.sampled_from([None, 100, 101, 102, 103, 2**31]))
        records.append(Record(message, realtime, "h", UNIT, invocation, pid, "python3", 6, cursor))
    return records


# --- bounds --------------------------------------------------------------------------------

_EXCEPTION_LIMIT = 1_000
_MESSAGE_LIMIT = 1_000
_CONTEXT_LIMIT = 200
_MODEL_LIMIT = 256
_VERSION_LIMIT = 64


def tracker_sizes(tracker: UnitTracker) -> dict[str, int]:
    """The size of every buffer ``tracker`` keeps (reads private state on purpose)."""
    incarnations = list(tracker._incs.items)
    streams = tracker._tracebacks._streams
    evidence = [item for incarnation in incarnations for item in incarnation.evidence]
    return {
        "incarnations": len(incarnations),
        "by_id": len(tracker._incs.by_id),
        "pid_owner": len(tracker._incs.pid_owner),
        "unsettled": len(tracker._crashes.unsettled),
        "seen_seq": len(tracker._seen._seen_seq),
        "recent_cursors": len(tracker._seen._recent),
        "traceback_streams": len(streams),
        "traceback_context": max((len(s.context or "") for s in streams.values()), default=0),
        "evidence": max((len(i.evidence) for i in incarnations), default=0),
        "evidence_exception": max((len(e.exception) for e in evidence), default=0),
        "evidence_message": max((len(e.message) for e in evidence), default=0),
        "pids": max((len(i.pids) for i in incarnations), default=0),
        "timeline": max((len(i.timeline) for i in incarnations), default=0),
        "model": max((len(i.model or "") for i in incarnations), default=0),
        "vllm_version": max((len(i.vllm_version or "") for i in incarnations), default=0),
        "invocation_id": max((len(i.id or "") for i in incarnations), default=0),
    }


def tracker_limits(max_incarnations: int, max_invocation_id: int) -> dict[str, int]:
    """The most each buffer may hold, whatever the input (``max_invocation_id``: the
    longest invocation id the source can deliver, a journal field)."""
    return {
        "incarnations": max_incarnations,
        "by_id": max_incarnations,
        "pid_owner": 64 * max_incarnations,
        "unsettled": max_incarnations,
        "seen_seq": 64,
        "recent_cursors": 64,
        "traceback_streams": 256,
        "traceback_context": _CONTEXT_LIMIT,
        "evidence": 32,
        "evidence_exception": _EXCEPTION_LIMIT,
        "evidence_message": _MESSAGE_LIMIT,
        "pids": 64,
        "timeline": len(Phase) + 1,
        "model": _MODEL_LIMIT,
        "vllm_version": _VERSION_LIMIT,
        "invocation_id": max_invocation_id,
    }


def assert_tracker_bounded(
    tracker: UnitTracker, max_incarnations: int = 8, max_invocation_id: int = 1 << 20
) -> None:
    """Fail with the offending buffer if any of the tracker's buffers is over its limit."""
    sizes = tracker_sizes(tracker)
    limits = tracker_limits(max(2, max_incarnations), max_invocation_id)
    over = {key: (sizes[key], limits[key]) for key in limits if sizes[key] > limits[key]}
    assert not over, f"tracker buffers over their limits (size, limit): {over}"


# --- corpus-shaped journal for the soak ----------------------------------------------------


@cache
def _cycle_templates() -> tuple[tuple[bytes, int], ...]:
    """Each golden entry as a ``bytes %`` template (tag, realtime, seqnum), its offset in µs."""
    entries = _golden_entries()
    base = int(str(entries[0]["__REALTIME_TIMESTAMP"]))
    templates = []
    for entry in entries:
        fields = dict(entry)
        for key in ("INVOCATION_ID", "_SYSTEMD_INVOCATION_ID"):
            value = fields.get(key)
            if isinstance(value, str):
                fields[key] = "@TAG@" + value[8:]
        offset = int(str(fields["__REALTIME_TIMESTAMP"])) - base
        fields["__REALTIME_TIMESTAMP"] = "@RT@"
        fields["__CURSOR"] = "s=50a4;i=@SEQ@;b=0;m=0;t=0;x=0"
        text = orjson.dumps(fields).replace(b"%", b"%%")
        text = text.replace(b"@TAG@", b"%(t)s").replace(b"@RT@", b"%(r)d")
        templates.append((text.replace(b"@SEQ@", b"%(s)x"), offset))
    return tuple(templates)


def journal_cycle(cycle: int, first_seqnum: int, start: datetime) -> Iterator[bytes]:
    """One incarnation pair of the golden incident, as new ``-o json`` lines.

    The golden journal holds a start, a load, a crash (FlashInfer mismatch), a restart and a
    second load; each cycle gets its own invocation ids, cursors and times (an hour apart per
    cycle), so the tracker sees an endless run of crashes and restarts.
    """
    base_us = int(start.timestamp() * 1_000_000) + cycle * 3_600_000_000
    tag = b"%08x" % cycle
    for seqnum, (template, offset) in enumerate(_cycle_templates(), first_seqnum):
        yield template % {b"t": tag, b"r": base_us + offset, b"s": seqnum}


def journal_cycle_length() -> int:
    """Records in one ``journal_cycle``."""
    return len(_golden_entries())
