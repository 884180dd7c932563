#!/usr/bin/env python3
"""Build the demo's bundled incidents (``vllm_sentinel/incidents/*.jsonl``) from real logs.

Each incident is ``journalctl -o json``-shaped: one JSON object per line with
``__REALTIME_TIMESTAMP``, ``MESSAGE``, ``_SYSTEMD_UNIT`` / ``UNIT``, invocation ids and PIDs.
The demo rewrites times and invocation ids when it plays them.

* ``kimi-k25-flashinfer-restart.jsonl`` — the incident that started the project: copied from
  the golden journal case (real ``journalctl`` output, ``tests/golden/journal``).
* ``qwen-kv-cache-too-small.jsonl`` — corpus 101 from the boot on: a KV-cache-too-small crash,
  systemd's restart, then a start that reaches ready.
* ``llama-stalled-load.jsonl`` — a start whose shard loading stops printing (corpus 030 shape).

Usage: ``python scripts/build-demo-data.py`` from the repository root.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from vllm_sentinel.engine.decode.text_log import TextLogDecoder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "vllm_sentinel" / "incidents"
STARTED = "39f53479d3a045ac8e11786248231fbf"


def _invocation_id(unit: str, number: int) -> str:
    """A stable invocation id, so that rebuilding the data changes nothing."""
    return hashlib.sha256(f"{unit}:{number}".encode()).hexdigest()[:32]


def _entry(
    unit: str,
    invocation: str,
    record_time: datetime,
    message: str,
    pid: int | None,
    ident: str | None,
    manager: bool,
) -> dict[str, str]:
    entry = {
        "__REALTIME_TIMESTAMP": str(int(record_time.timestamp() * 1_000_000)),
        "MESSAGE": message,
        "_HOSTNAME": "demo-gpu-01",
        "SYSLOG_IDENTIFIER": ident or "python3",
    }
    if manager:
        entry.update(
            {
                "_PID": "1",
                "_SYSTEMD_UNIT": "init.scope",
                "UNIT": unit,
                "INVOCATION_ID": invocation,
                "SYSLOG_IDENTIFIER": "systemd",
            }
        )
        if message.startswith("Started "):
            entry["MESSAGE_ID"] = STARTED
    else:
        entry.update(
            {"_SYSTEMD_UNIT": unit, "_SYSTEMD_INVOCATION_ID": invocation, "_PID": str(pid or 1000)}
        )
    return entry


def from_journald_text(path: Path, unit: str, start_line: int) -> list[dict[str, str]]:
    decoder = TextLogDecoder(unit, reference_year=2026)
    lines = path.read_bytes().splitlines(keepends=True)[start_line:]
    records = decoder.feed(b"".join(lines)) + decoder.flush()
    entries = []
    starts = 0
    invocation = _invocation_id(unit, starts)
    for record in records:
        if record.message.startswith("-- "):
            continue
        manager = record.syslog_identifier == "systemd"
        text = record.message
        if manager and ": " in text and text.split(": ", 1)[0].endswith(".service"):
            text = text.replace(text.split(": ", 1)[0], unit, 1)
        if manager and text.startswith("Started "):
            starts += 1
            invocation = _invocation_id(unit, starts)
        assert record.realtime is not None
        entries.append(
            _entry(
                unit,
                invocation,
                record.realtime,
                text,
                record.pid,
                record.syslog_identifier,
                manager,
            )
        )
    return entries


def _tqdm_interval(seconds: int) -> str:
    """tqdm's format_interval: MM:SS, or H:MM:SS past an hour."""
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def stalled_load() -> list[dict[str, str]]:
    unit = "vllm-llama-405b.service"
    invocation = _invocation_id(unit, 1)
    base = datetime(2026, 11, 28, 20, 0, 0, tzinfo=UTC).timestamp()
    script: list[tuple[float, str, int | None, bool]] = [
        (0, "Started vllm-llama-405b.service - vLLM Llama 3.1 405B.", None, True),
        (
            4,
            "(APIServer pid=4100) INFO 11-28 20:00:04 [api_server.py:1805] vLLM API server version 0.11.0",
            4100,
            False,
        ),
        (
            5,
            "(APIServer pid=4100) INFO 11-28 20:00:05 [utils.py:233] non-default args: {'model': 'meta-llama/Llama-3.1-405B-Instruct-FP8', 'tensor_parallel_size': 4}",
            4100,
            False,
        ),
        (
            14,
            "(EngineCore_DP0 pid=4180) INFO 11-28 20:00:14 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='meta-llama/Llama-3.1-405B-Instruct-FP8', tensor_parallel_size=4",
            4180,
            False,
        ),
        (
            30,
            "(Worker_TP0 pid=4201) INFO 11-28 20:00:30 [gpu_model_runner.py:2602] Starting to load model meta-llama/Llama-3.1-405B-Instruct-FP8...",
            4201,
            False,
        ),
    ]
    for shard in range(0, 37):  # tqdm's own bar: 30 s a shard, its remaining time counting down
        offset = 36 + shard * 30
        pct = round(100 * shard / 109)
        remaining = _tqdm_interval((109 - shard) * 30) if shard else "?"
        rate = "30.00s/it" if shard else "?it/s"
        script.append(
            (
                offset,
                f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {shard}/109 [{_tqdm_interval(shard * 30)}<{remaining}, {rate}]",
                4201,
                False,
            )
        )
    for beat in range(1, 25):
        offset = 36 + 36 * 30 + beat * 60
        script.append(
            (
                offset,
                f"(APIServer pid=4100) DEBUG 11-28 20:{offset // 60 % 60:02d}:{offset % 60:02d} [utils.py:750] Waiting for 1 local, 0 remote core engine proc(s) to start.",
                4100,
                False,
            )
        )
    entries = []
    for offset, text, pid, manager in script:
        when = datetime.fromtimestamp(base + offset, UTC)
        entries.append(_entry(unit, invocation, when, text, pid, None, manager))
    return entries


def write(name: str, entries: list[dict[str, str]]) -> None:
    with open(OUT / name, "w", encoding="utf-8") as stream:
        for entry in entries:
            stream.write(json.dumps(entry, ensure_ascii=False) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    golden = ROOT / "tests" / "golden" / "journal" / "001-kimi-k25-flashinfer-restart.jsonl"
    shutil.copyfile(golden, OUT / "kimi-k25-flashinfer-restart.jsonl")
    corpus = (
        ROOT
        / "tests"
        / "golden"
        / "logs"
        / "101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"
    )
    write("qwen-kv-cache-too-small.jsonl", from_journald_text(corpus, "vllm-qwen-14b.service", 67))
    write("llama-stalled-load.jsonl", stalled_load())


if __name__ == "__main__":
    main()
