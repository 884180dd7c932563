"""Benchmark inputs built from the real-log corpus, and the reference marker rules.

* ``build_text(path, min_lines)``: ``tests/golden/logs/*.log`` concatenated and repeated to at
  least ``min_lines`` lines; each copy gets its own PIDs (``pid=N`` and ``ident[N]``), as a new
  incarnation would, so no cache sees the same prefix text forever.
* ``build_journal_json(workdir, min_records)``: the same logs as journald stores them — one copy
  written through ``systemd-journal-remote`` into a real journal file (a unit per log, systemd's
  ``Started`` line first, the fields journald gives a service's stdout), read back with the real
  ``journalctl -o json -a`` twice: every field, and ``--output-fields`` cut to what the decoder
  reads (what the daemon asks for). Each form is repeated to ``min_records`` records with
  fresh cursors, times, invocation ids and PIDs per copy.
* ``RULES``: ten phase-marker regexes, the same for mtail and ``grep -cE`` (RE2 and POSIX ERE
  agree on them); ``mtail_program()`` renders them as an mtail program of ten counters.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from tests.support.journal_writer import JournalWriter, manager_line, service_line
from vllm_sentinel.engine.decode.journal_json import JOURNAL_FIELDS
from vllm_sentinel.engine.decode.text_log import TextLogDecoder

__all__ = [
    "RULES",
    "JsonInputs",
    "build_journal_json",
    "build_text",
    "corpus_files",
    "mtail_program",
]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "golden" / "logs"

RULES: tuple[tuple[str, str], ...] = (
    ("process_started", r"vLLM (API )?server version "),
    ("engine_init", r"Initializing an? (V[01] )?LLM engine"),
    ("load_started", r"Starting to load model |Loading model from scratch"),
    ("weights_loaded", r"Loading weights took |Model loading took |Loading model weights took "),
    ("compile", r"torch\.compile (takes|took) "),
    ("kv_cache", r"Available KV cache memory: |KV cache size: |# (GPU|CUDA) blocks: "),
    ("cuda_graphs", r"Capturing CUDA graph|Graph capturing finished "),
    ("api_server", r"Starting vLLM (API )?server|Available routes are"),
    ("ready", r"Application startup complete"),
    (
        "failure",
        r"Traceback \(most recent call last\)|EngineCore failed to start|died unexpectedly",
    ),
)
"""(counter name, regex): what mtail counts and grep matches, one phase marker family each."""

_PID = re.compile(rb"pid=(\d{1,9})|(\w)\[(\d{1,9})\]:")


def corpus_files() -> list[Path]:
    """The corpus logs, in name order."""
    return sorted(CORPUS.glob("*.log"))


def mtail_program() -> str:
    """An mtail program with one counter per rule."""
    lines = [f"counter vllm_marker_{name}" for name, _ in RULES]
    lines.append("")
    for name, pattern in RULES:
        lines += [f"/{pattern}/ {{", f"  vllm_marker_{name}++", "}"]
    return "\n".join(lines) + "\n"


def _corpus_bytes() -> bytes:
    return b"".join(path.read_bytes().rstrip(b"\n") + b"\n" for path in corpus_files())


def _shift_pids(data: bytes, shift: int) -> bytes:
    def replace(match: re.Match[bytes]) -> bytes:
        if match.group(1) is not None:
            return b"pid=%d" % (int(match.group(1)) + shift)
        return b"%s[%d]:" % (match.group(2), int(match.group(3)) + shift)

    return _PID.sub(replace, data) if shift else data


def build_text(path: Path, min_lines: int) -> int:
    """Write the text input (at least ``min_lines`` lines) to ``path``; return its lines."""
    base = _corpus_bytes()
    per_copy = base.count(b"\n")
    copies = max(1, -(-min_lines // per_copy))
    with path.open("wb") as out:
        for copy in range(copies):
            out.write(_shift_pids(base, copy * 7))
    return copies * per_copy


# --- journal JSON ------------------------------------------------------------------------

_STARTED = "39f53479d3a045ac8e11786248231fbf"
_BOOT = "5b3a1c0d9e8f47a6b2c4d6e8f0a1b3c5"
_MACHINE = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
_START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
_STEP_US = 997  # between two records (about a thousand a second, as a busy start)


@dataclass(frozen=True, slots=True)
class JsonInputs:
    """The two journal JSON inputs and how many records each has."""

    full: Path
    cut: Path
    records: int
    fields_full: float  # mean number of fields per record
    fields_cut: float
    bytes_full: float  # mean bytes per record
    bytes_cut: float


def _entries() -> Iterator[dict[str, str | bytes | int]]:
    """One copy of the corpus as journal entries: a unit and an invocation per log."""
    now = _START_US
    for index, path in enumerate(corpus_files()):
        unit = f"vllm-{index % 8}.service"
        invocation = f"{index:032x}"
        now += _STEP_US
        yield manager_line(
            unit, invocation, f"Started {unit} - vLLM server.", _STARTED, now, boot_id=_BOOT
        )
        decoder = TextLogDecoder(unit, reference_year=2026)
        records = decoder.feed(path.read_bytes()) + decoder.flush()
        for record in records:
            now += _STEP_US
            pid = record.pid or 4121 + index
            message: str | bytes = record.message
            yield service_line(
                unit,
                invocation,
                pid,
                message,
                now,
                record.syslog_identifier or "python3",
                boot_id=_BOOT,
                extra={
                    "_EXE": "/opt/vllm/bin/python3.12",
                    "_CMDLINE": "/opt/vllm/bin/python3 -m vllm.entrypoints.openai.api_server "
                    "--model /models/Qwen2.5-72B-Instruct --tensor-parallel-size 8 "
                    "--max-model-len 32768 --port 8000",
                    "_CAP_EFFECTIVE": "1ffffffffff",
                    "_MACHINE_ID": _MACHINE,
                    "_STREAM_ID": f"{index:032x}",
                },
            )


def _read_journal(path: Path, fields: tuple[str, ...] | None) -> list[bytes]:
    argv = ["journalctl", f"--file={path}", "--output=json", "--all", "--no-pager", "-n", "all"]
    if fields:
        argv.append("--output-fields=" + ",".join(fields))
    output = subprocess.run(argv, capture_output=True, check=True, timeout=120).stdout
    return [line for line in output.split(b"\n") if line.strip()]


def _replicate(template: list[bytes], path: Path, min_records: int) -> tuple[int, float, float]:
    entries = [orjson.loads(line) for line in template]
    span = (len(entries) + 1) * _STEP_US
    copies = max(1, -(-min_records // len(entries)))
    seq = 0
    total_fields = total_bytes = 0
    with path.open("wb") as out:
        for copy in range(copies):
            lines = []
            for entry in entries:
                seq += 1
                item = dict(entry)
                realtime = int(item["__REALTIME_TIMESTAMP"]) + copy * span
                item["__REALTIME_TIMESTAMP"] = str(realtime)
                item["__MONOTONIC_TIMESTAMP"] = str(realtime - _START_US + 10_000_000)
                item["__CURSOR"] = (
                    f"s=9f0e8d7c6b5a49382716a5b4c3d2e1f0;i={seq:x};b={_BOOT};"
                    f"m={realtime - _START_US:x};t={realtime:x};x={seq * 2654435761 % 2**64:x}"
                )
                # each copy is other starts: new invocation ids and journald streams (a stream
                # id is random per stream; a reused one would route lines to the first copy)
                for key in ("INVOCATION_ID", "_SYSTEMD_INVOCATION_ID", "_STREAM_ID"):
                    if key in item:
                        item[key] = f"{copy:08x}{item[key][8:]}"
                if item.get("_PID") not in (None, "1"):
                    item["_PID"] = str(int(item["_PID"]) + copy * 7)
                line = orjson.dumps(item)
                total_fields += len(item)
                total_bytes += len(line) + 1
                lines.append(line)
            out.write(b"\n".join(lines) + b"\n")
    records = copies * len(entries)
    return records, total_fields / records, total_bytes / records


def build_journal_json(workdir: Path, min_records: int) -> JsonInputs:
    """Write the journal JSON inputs (full and cut fields) under ``workdir``."""
    journal_dir = workdir / "journal-template"
    journal_dir.mkdir(parents=True, exist_ok=True)
    entries = list(_entries())
    with JournalWriter(journal_dir, "corpus") as writer:
        writer.write(entries)
        writer.wait_until_readable(len(entries), timeout=60)
    journal = journal_dir / "corpus.journal"
    full = workdir / "journal-full.jsonl"
    cut = workdir / "journal-cut.jsonl"
    records, fields_full, bytes_full = _replicate(_read_journal(journal, None), full, min_records)
    _, fields_cut, bytes_cut = _replicate(_read_journal(journal, JOURNAL_FIELDS), cut, min_records)
    journal.unlink()  # 8 MiB each
    return JsonInputs(full, cut, records, fields_full, fields_cut, bytes_full, bytes_cut)
