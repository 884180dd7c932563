"""End to end: real journal files → real vllm-sentinel → real Prometheus → real Alertmanager.

A recorded incident is written into journal files (``systemd-journal-remote``) while the real
daemon follows them with the real ``journalctl``; Prometheus scrapes the daemon every second and
evaluates a fast copy of ``deploy/prometheus/vllm-sentinel-rules.yml``; Alertmanager, configured
from ``deploy/alertmanager/example.yml``, delivers to a webhook served by the test.

The incident, on two hosts (each a local host of the daemon reading its own journal directory):

* ``llm-two`` / ``vllm-kimi-k25.service`` (GPUs read through ``nvidia-smi``: the stub in
  ``tests/support/bin``, there being no GPU here): it has served for hours (invocation Z,
  ready) — that is what Prometheus first sees, with every crash counter at 0. Then the
  operator restarts it: Z stops cleanly, the new start dies on the flashinfer-cubin version
  check (``dependency_mismatch``, ``RuntimeError``), systemd restarts it and the second start
  loads for nine minutes and becomes ready (``tests/support/make_incident.py``, moved to end a
  few seconds ago);
* ``llm-three`` / ``vllm-llama-405b.service`` (no GPU collection, ``loading_weights`` stall
  threshold 3 s): starts, loads a third of its shards, then falls silent — stalled;
* ``llm-three`` / ``vllm-qwen-32b.service``: a start three hours ago became ready (compiling
  took 60 s): the backfill records it in the startup history. The current start has been
  compiling for over three minutes, more than 1.5 times the usual 60 s and a minute more: slower
  than usual, still moving, with an ETA from that history.

Then, through Prometheus' HTTP API: every dashboard and rule expression answers with data (and
no metric or label it names is missing), ``VllmCrashed``, ``VllmLoadingStalled`` and
``VllmStartupSlowerThanUsual`` fire for the right unit and cause or phase, and Alertmanager
delivers them to the webhook.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.e2e.conftest import (
    DASHBOARD,
    RULES,
    SCRAPE_JOB,
    Prometheus,
    WebhookReceiver,
    poll,
    poll_async,
)
from tests.support import make_incident
from tests.support.daemon import running_daemon
from tests.support.journal_writer import (
    JOURNAL_REMOTE,
    MESSAGE_ID_DEACTIVATED,
    MESSAGE_ID_STARTED,
    MESSAGE_ID_STARTING,
    MESSAGE_ID_STOPPED,
    MESSAGE_ID_STOPPING,
    JournalWriter,
    manager_line,
    service_line,
    to_realtime_us,
)
from tests.support.promql import dashboard_queries, rule_expressions, rules
from vllm_sentinel.config import Config, parse_config

# one worker under pytest-xdist: the session's Prometheus and Alertmanager are started once
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prometheus")]

Entry = dict[str, str | bytes | int]

STUB_BIN = Path(__file__).resolve().parents[1] / "support" / "bin"

HOST_A = make_incident.HOST  # "llm-two"
UNIT_A = make_incident.UNIT  # "vllm-kimi-k25.service"
INVOCATION_Z = "5a0e6c2f9d1b4e7a8c3f2b1d0e9a8f76"  # A's long-serving start before the incident
Z_API, Z_CORE = 180200, 180290
Z_WORKERS = {rank: 180343 + rank for rank in range(8)}

HOST_B = "llm-three"
UNIT_B = "vllm-llama-405b.service"
INVOCATION_Y = "c4d8e2a61f0b4937a5e6d7c8b9a01f23"
B_API, B_CORE, B_TP0 = 41200, 41290, 41343
B_MODEL = "/shared/llama-3.1-405b-instruct-fp8"
B_SHARDS, B_SHARDS_LOADED = 109, 36
B_BOOT_ID = "0d6f2a9c81e34b57a9c0e1f2d3b4a596"
STALL_THRESHOLD_SECONDS = 3
UNIT_C = "vllm-qwen-32b.service"
C_MODEL = "Qwen/Qwen3-32B"
INVOCATION_X = "7e1f0a3c5b2d4e6f8a9b0c1d2e3f4a5b"  # C's start that became ready, 3 h ago
INVOCATION_W = "9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a"  # C's current start, slow in compiling
C_PID = 52100
C_COMPILING_FOR = 190.0  # seconds; the usual compile is 60 s, slow past max(90, 60 + 60)
C_AFTER_COMPILE = 10.0 + 20.0 + 5.0  # the ready start's phases after compiling

CAUSE_A = "dependency_mismatch"
GIB_IN_MIB = 1024

# Deadlines (wall clock) for what the whole pipeline must do, from the write that causes it.
SCRAPE_DEADLINE = 20.0  # a written record → a queryable sample (first scrape of a new target)
ALERT_DEADLINE = 25.0  # crash written / load silent → the alert firing in Prometheus
DELIVERY_DEADLINE = 15.0  # firing in Prometheus → POSTed to the webhook


# --- the incident ----------------------------------------------------------------------------


def _header(role: str, pid: int, level: str, at: datetime, src: str, text: str) -> str:
    """A vLLM log line: ``(ROLE pid=N) LEVEL MM-DD HH:MM:SS [src] text``."""
    return f"({role} pid={pid}) {level} {at.strftime('%m-%d %H:%M:%S')} [{src}] {text}"


def _serving_start_z(started: datetime) -> list[Entry]:
    """Invocation Z of unit A: a start that became ready hours ago and has served since."""
    out: list[Entry] = []

    def manager(offset: float, message: str, message_id: str | None) -> None:
        at = started + timedelta(seconds=offset)
        out.append(
            manager_line(
                UNIT_A,
                INVOCATION_Z,
                message,
                message_id,
                to_realtime_us(at),
                hostname=HOST_A,
                boot_id=make_incident.BOOT_ID,
            )
        )

    def line(offset: float, role: str, pid: int, src: str, text: str) -> None:
        at = started + timedelta(seconds=offset)
        out.append(
            service_line(
                UNIT_A,
                INVOCATION_Z,
                pid,
                _header(role, pid, "INFO", at, src, text),
                to_realtime_us(at),
                "vllm",
                hostname=HOST_A,
                boot_id=make_incident.BOOT_ID,
            )
        )

    def raw(offset: float, pid: int, text: str) -> None:
        at = started + timedelta(seconds=offset)
        out.append(
            service_line(
                UNIT_A,
                INVOCATION_Z,
                pid,
                text,
                to_realtime_us(at),
                "vllm",
                hostname=HOST_A,
                boot_id=make_incident.BOOT_ID,
            )
        )

    model = make_incident.MODEL
    manager(0.0, f"Starting {UNIT_A} - {make_incident.DESCRIPTION}...", MESSAGE_ID_STARTING)
    manager(0.004, f"Started {UNIT_A} - {make_incident.DESCRIPTION}.", MESSAGE_ID_STARTED)
    line(
        9.1,
        "EngineCore_DP0",
        Z_CORE,
        "core.py:93",
        f"Initializing a V1 LLM engine (v0.16.0) with config: model='{model}', "
        f"tokenizer='{model}', dtype=torch.bfloat16, max_seq_len=262144, "
        "tensor_parallel_size=8, pipeline_parallel_size=1, quantization=modelopt_fp4",
    )
    for rank, pid in Z_WORKERS.items():
        line(
            17.3,
            f"Worker_TP{rank}",
            pid,
            "parallel_state.py:1325",
            f"world_size=8 rank={rank} local_rank={rank} "
            "distributed_init_method=tcp://127.0.0.1:40311 backend=nccl",
        )
    line(
        20.8,
        "Worker_TP0",
        Z_WORKERS[0],
        "gpu_model_runner.py:3425",
        f"Starting to load model {model}...",
    )
    line(
        431.5,
        "Worker_TP0",
        Z_WORKERS[0],
        "default_loader.py:291",
        "Loading weights took 409.88 seconds",
    )
    line(
        431.7,
        "Worker_TP0",
        Z_WORKERS[0],
        "gpu_model_runner.py:3530",
        "Model loading took 71.43 GiB memory and 410.702 seconds",
    )
    line(
        466.2,
        "EngineCore_DP0",
        Z_CORE,
        "kv_cache_utils.py:1291",
        "GPU KV cache size: 1,312,640 tokens",
    )
    line(
        532.4,
        "Worker_TP0",
        Z_WORKERS[0],
        "gpu_model_runner.py:4587",
        "Graph capturing finished in 64 secs, took 3.41 GiB",
    )
    line(
        548.0,
        "APIServer",
        Z_API,
        "api_server.py:1995",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    )
    raw(548.9, Z_API, f"(APIServer pid={Z_API}) INFO:     Started server process [{Z_API}]")
    raw(548.9, Z_API, f"(APIServer pid={Z_API}) INFO:     Waiting for application startup.")
    raw(549.0, Z_API, f"(APIServer pid={Z_API}) INFO:     Application startup complete.")
    raw(
        3600.0,
        Z_API,
        f"(APIServer pid={Z_API}) INFO:     10.20.0.7:51234 - "
        '"POST /v1/chat/completions HTTP/1.1" 200 OK',
    )
    return out


def _planned_stop_z(stopping: datetime) -> list[Entry]:
    """The operator's ``systemctl restart``: Z stops cleanly just before the incident."""

    def manager(offset: float, message: str, message_id: str | None) -> Entry:
        return manager_line(
            UNIT_A,
            INVOCATION_Z,
            message,
            message_id,
            to_realtime_us(stopping + timedelta(seconds=offset)),
            hostname=HOST_A,
            boot_id=make_incident.BOOT_ID,
        )

    def raw(offset: float, text: str) -> Entry:
        return service_line(
            UNIT_A,
            INVOCATION_Z,
            Z_API,
            f"(APIServer pid={Z_API}) {text}",
            to_realtime_us(stopping + timedelta(seconds=offset)),
            "vllm",
            hostname=HOST_A,
            boot_id=make_incident.BOOT_ID,
        )

    return [
        manager(0.0, f"Stopping {UNIT_A} - {make_incident.DESCRIPTION}...", MESSAGE_ID_STOPPING),
        raw(0.1, "INFO:     Shutting down"),
        raw(0.3, "INFO:     Waiting for application shutdown."),
        raw(0.4, "INFO:     Application shutdown complete."),
        raw(0.5, f"INFO:     Finished server process [{Z_API}]"),
        manager(2.0, f"{UNIT_A}: Deactivated successfully.", MESSAGE_ID_DEACTIVATED),
        manager(2.01, f"Stopped {UNIT_A} - {make_incident.DESCRIPTION}.", MESSAGE_ID_STOPPED),
    ]


def _recorded_incident_ending(end: datetime) -> list[Entry]:
    """``make_incident``'s crash, restart and slow successful load, moved to end at ``end``.

    Entries are put in time order: the recorded late delivery of the root cause's last lines
    is covered by ``tests/integration/test_daemon.py``; here the crash's age (minutes) lets the
    daemon count it on its next tick, which must not come before its root cause.
    """
    entries = sorted(make_incident.build_incident(), key=lambda e: int(e["__REALTIME_TIMESTAMP"]))
    shift = to_realtime_us(end) - int(entries[-1]["__REALTIME_TIMESTAMP"])
    return [
        {**entry, "__REALTIME_TIMESTAMP": int(entry["__REALTIME_TIMESTAMP"]) + shift}
        for entry in entries
    ]


def _incident_start(entries: list[Entry]) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=int(entries[0]["__REALTIME_TIMESTAMP"])
    )


def _llama_line(at: datetime, pid: int, message: str, **extra: str | int) -> Entry:
    return service_line(
        UNIT_B,
        INVOCATION_Y,
        pid,
        message,
        to_realtime_us(at),
        "vllm",
        hostname=HOST_B,
        boot_id=B_BOOT_ID,
        extra=extra or None,
    )


def _llama_start(at: datetime) -> list[Entry]:
    """Unit B's start up to engine configuration (phase ``initializing``)."""

    def manager(offset: float, message: str, message_id: str) -> Entry:
        return manager_line(
            UNIT_B,
            INVOCATION_Y,
            message,
            message_id,
            to_realtime_us(at + timedelta(seconds=offset)),
            hostname=HOST_B,
            boot_id=B_BOOT_ID,
        )

    engine = at + timedelta(seconds=0.3)
    return [
        manager(0.0, f"Starting {UNIT_B} - vLLM Llama 3.1 405B...", MESSAGE_ID_STARTING),
        manager(0.01, f"Started {UNIT_B} - vLLM Llama 3.1 405B.", MESSAGE_ID_STARTED),
        _llama_line(
            engine,
            B_CORE,
            _header(
                "EngineCore_DP0",
                B_CORE,
                "INFO",
                engine,
                "core.py:93",
                f"Initializing a V1 LLM engine (v0.17.1) with config: model='{B_MODEL}', "
                f"tokenizer='{B_MODEL}', dtype=torch.bfloat16, max_seq_len=131072, "
                "tensor_parallel_size=8, pipeline_parallel_size=1, quantization=fp8",
            ),
        ),
    ]


def _qwen_starts(now: datetime) -> list[Entry]:
    """Unit C: a start 3 h ago that became ready, and one compiling for C_COMPILING_FOR s."""
    out: list[Entry] = []

    def start(invocation: str, began: datetime, steps: list[tuple[float, str]]) -> None:
        out.append(
            manager_line(
                UNIT_C,
                invocation,
                f"Started {UNIT_C} - vLLM Qwen3 32B.",
                MESSAGE_ID_STARTED,
                to_realtime_us(began),
                hostname=HOST_B,
                boot_id=B_BOOT_ID,
            )
        )
        for offset, text in steps:
            at = began + timedelta(seconds=offset)
            line = _header("EngineCore_DP0", C_PID, "INFO", at, "x.py:1", text)
            if text.startswith("INFO:"):
                line = f"(APIServer pid={C_PID}) {text}"
            out.append(
                service_line(
                    UNIT_C,
                    invocation,
                    C_PID,
                    line,
                    to_realtime_us(at),
                    "vllm",
                    hostname=HOST_B,
                    boot_id=B_BOOT_ID,
                )
            )

    begin = [
        (5.0, f"Initializing a V1 LLM engine (v0.17.1) with config: model='{C_MODEL}'"),
        (10.0, f"Starting to load model {C_MODEL}..."),
        (40.0, "Dynamo bytecode transform time: 6.12 s"),
    ]
    start(
        INVOCATION_X,
        now - timedelta(hours=3),
        [
            *begin,
            (100.0, "Available KV cache memory: 20.5 GiB"),
            (110.0, "Graph capturing finished in 20 secs, took 0.61 GiB"),
            (130.0, "Starting vLLM API server 0 on http://0.0.0.0:8000"),
            (135.0, "INFO:     Application startup complete."),
        ],
    )
    start(INVOCATION_W, now - timedelta(seconds=40 + C_COMPILING_FOR), begin)
    return out


def _llama_load_then_silence(at: datetime) -> list[Entry]:
    """Unit B loads a third of its shards, then prints nothing more: the stall.

    One entry without ``MESSAGE`` (structured fields only, as ``sd_journal_send`` allows) is
    among them: the daemon skips it and counts it in ``vllm_sentinel_records_skipped_total``.
    """
    out = [
        _llama_line(
            at,
            B_TP0,
            _header(
                "Worker_TP0",
                B_TP0,
                "INFO",
                at,
                "gpu_model_runner.py:3425",
                f"Starting to load model {B_MODEL}...",
            ),
        )
    ]
    for shard in range(B_SHARDS_LOADED + 1):
        moment = at + timedelta(milliseconds=10 * (shard + 1))
        done = 4.1 * shard
        out.append(
            _llama_line(
                moment,
                B_TP0,
                f"\rLoading safetensors checkpoint shards: {100 * shard / B_SHARDS:3.0f}% Completed | "
                f"{shard}/{B_SHARDS} [{int(done) // 60:02d}:{int(done) % 60:02d}<?, 4.10s/it]",
            )
        )
        if shard == B_SHARDS_LOADED // 2:
            structured = _llama_line(moment, B_TP0, "", CHECKPOINT_SHARD=str(shard))
            del structured["MESSAGE"]
            out.append(structured)
    return out


def _gpu_state(path: Path, worker_pids: Mapping[int, int]) -> None:
    """Write the stub nvidia-smi's answer: 8 H200, each rank's worker holding ~118 GiB."""
    gpus, apps = [], []
    for index in range(8):
        uuid = f"GPU-7f36e1b2-94b8-4c1a-8d2e-3a6f0c2e5d{index:02d}"
        held = 118 * GIB_IN_MIB + 37 * index if index in worker_pids else 0
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "name": "NVIDIA H200",
                "memory.used": held + 512,
                "memory.total": 143771,
            }
        )
        if index in worker_pids:
            apps.append({"gpu_uuid": uuid, "pid": worker_pids[index], "used_memory": held})
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"gpus": gpus, "apps": apps}), encoding="utf-8")
    temporary.replace(path)  # the stub reads it on every poll: never a half-written file


def _config(port: int, state: Path, journal_a: Path, journal_b: Path) -> Config:
    return parse_config(f"""
[exporter]
listen = "127.0.0.1:{port}"
[defaults]
state_directory = "{state}"
cursor_flush_interval_seconds = 0.2
gpu_poll_interval_seconds = 0.5
[[hosts]]
name = "{HOST_A}"
local = true
units = ["vllm-*.service"]
journalctl_args = ["--directory={journal_a}"]
gpu = "nvidia-smi"
[[hosts]]
name = "{HOST_B}"
local = true
units = ["vllm-*.service"]
journalctl_args = ["--directory={journal_b}"]
gpu = "none"
[hosts.stall_threshold_seconds]
loading_weights = {STALL_THRESHOLD_SECONDS}
""")


# --- PromQL inspection -----------------------------------------------------------------------

_COMMENT = re.compile(r"#[^\n]*")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_SELECTOR = re.compile(r"(?<![\w:.\"])([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?")
_NOT_METRICS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
# a string argument of a function (label_replace's), not a matcher's value (those follow = or ~)
_ARGUMENT_STRING = re.compile(r'(?<=[(,])(\s*)"[^"]*"')
OPTIONAL_TARGET_LABELS = frozenset({"replica"})
"""Labels the rules join on that one sentinel's target does not have (replicas carry them)."""


def selectors(expr: str) -> list[str]:
    """The series selectors of a PromQL expression (``name`` or ``name{matchers}``)."""
    text = _RANGE.sub(" ", _GROUPING.sub(" ", _COMMENT.sub("", expr)))
    text = _ARGUMENT_STRING.sub(r'\1""', text)
    found = []
    for match in _SELECTOR.finditer(text):
        name, matchers = match.group(1), match.group(2) or ""
        follows = text[match.end() :].lstrip()
        if name in _NOT_METRICS or (not matchers and follows.startswith("(")):
            continue  # an operator, or a function / aggregation
        found.append(name + matchers)
    return found


def grouping_labels(expr: str) -> set[str]:
    """Label names used in ``by``/``without``/``on``/``ignoring``/``group_*`` clauses."""
    names: set[str] = set()
    for clause in _GROUPING.findall(_COMMENT.sub("", expr)):
        names.update(name.strip() for name in clause.split(",") if name.strip())
    return names


def _missing_parts(prometheus: Prometheus, where: str, expr: str, labels: set[str]) -> list[str]:
    problems = [
        f"{where}: selector {selector} has no series"
        for selector in selectors(expr)
        if not prometheus.vector(selector)
    ]
    problems += [
        f"{where}: label {name!r} exists on no series"
        for name in sorted(grouping_labels(expr) - labels - OPTIONAL_TARGET_LABELS)
    ]
    return problems


def _expressions() -> Iterator[tuple[str, str, bool]]:
    """``(where, expr, is_alert)`` for every dashboard query and every rule of the fast copy."""
    for where, expr in dashboard_queries(DASHBOARD):
        yield where, expr, False
    for rule in rules(RULES):
        name = rule.get("record") or rule["alert"]
        yield f"rule {name}", rule["expr"].strip(), "alert" in rule


def _expression_problems(prometheus: Prometheus) -> list[str]:
    """Every dashboard and rule expression: accepted (no bad_data), with data, nothing missing.

    Alert expressions answer only while firing, so for them each selector they use must have
    series; grouping labels (``by``, ``on`` …) of every expression must exist.
    """
    labels = set(prometheus.api("labels")["data"])
    problems: list[str] = []
    for where, expr, is_alert in _expressions():
        result = prometheus.vector(expr)  # fails on bad_data
        if not is_alert and not result:
            problems.append(f"{where}: no data for {expr!r}")
        problems += _missing_parts(prometheus, where, expr, labels)
    return problems


def _check_quiet(prometheus: Prometheus) -> None:
    """The close cases: A's clean stop is no crash, B did not crash, A never stalled, no loop."""
    (total,) = prometheus.vector(f'sum(vllm_sentinel_unit_crashes_total{{unit="{UNIT_A}"}})')
    assert total["value"][1] == "1"
    # one stray sample cannot fire (for: 1s needs two evaluations in a row)
    assert (
        prometheus.vector(
            f'max_over_time(ALERTS{{alertstate="firing",alertname="VllmLoadingStalled",'
            f'host="{HOST_A}"}}[10m])'
        )
        == []
    )
    assert (
        prometheus.vector(f'max_over_time(ALERTS{{alertname="VllmCrashed",host="{HOST_B}"}}[10m])')
        == []
    )
    assert prometheus.vector('max_over_time(ALERTS{alertname="VllmCrashLooping"}[10m])') == []
    # C is slower than usual, and the fallback alert leaves it to VllmStartupSlowerThanUsual
    assert (
        prometheus.vector(
            f'max_over_time(ALERTS{{alertname="VllmStartupSlow",unit="{UNIT_C}"}}[10m])'
        )
        == []
    )


# --- alert helpers ---------------------------------------------------------------------------


def _firing(prometheus: Prometheus, alertname: str, **labels: str) -> list[dict[str, Any]]:
    return [
        alert
        for alert in prometheus.alerts()
        if alert["labels"].get("alertname") == alertname
        and alert["state"] == "firing"
        and all(alert["labels"].get(key) == value for key, value in labels.items())
    ]


def _delivered(alerts: list[dict[str, Any]], alertname: str, **labels: str) -> bool:
    return any(
        alert["status"] == "firing"
        and alert["labels"].get("alertname") == alertname
        and all(alert["labels"].get(key) == value for key, value in labels.items())
        for alert in alerts
    )


# --- tests -----------------------------------------------------------------------------------


def test_prometheus_loaded_every_rule_healthy(prometheus: Prometheus) -> None:
    """The fast copy of the rules loads into Prometheus: every rule present and evaluating."""
    expected = {rule.get("record") or rule["alert"] for rule in rules(prometheus.rules_file)}

    def evaluated() -> list[dict[str, Any]] | None:
        loaded = [rule for group in prometheus.rule_groups() for rule in group["rules"]]
        return loaded if all(rule["health"] != "unknown" for rule in loaded) else None

    loaded = poll(evaluated, timeout=10, what="every rule evaluated once")
    assert {rule["name"] for rule in loaded} == expected
    assert [
        (rule["name"], rule.get("lastError")) for rule in loaded if rule["health"] != "ok"
    ] == []
    assert rule_expressions(prometheus.rules_file)  # recording and alerting rules both present


@pytest.mark.asyncio
async def test_incident_through_prometheus_and_alertmanager(
    prometheus: Prometheus,
    webhook: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash and a stalled load in real journals: panels have data, alerts fire and arrive."""
    journal_remote = require_binary(JOURNAL_REMOTE)
    journalctl = require_binary("journalctl")
    gpu_state = tmp_path / "nvidia-smi.json"
    monkeypatch.setenv("PATH", f"{STUB_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(gpu_state))
    (tmp_path / "journal-a").mkdir()
    (tmp_path / "journal-b").mkdir()
    now = datetime.now(UTC)
    incident = _recorded_incident_ending(now - timedelta(seconds=20))
    incident_start = _incident_start(incident)
    serving = _serving_start_z(incident_start - timedelta(hours=3))

    with (
        JournalWriter(
            tmp_path / "journal-a", "llm-two", binary=journal_remote, journalctl=journalctl
        ) as writer_a,
        JournalWriter(
            tmp_path / "journal-b", "llm-three", binary=journal_remote, journalctl=journalctl
        ) as writer_b,
    ):
        # before: A serving for hours on 8 GPUs, B just started
        _gpu_state(gpu_state, Z_WORKERS)
        writer_a.write_and_flush(serving)
        b_started = now - timedelta(seconds=1)
        qwen = _qwen_starts(now)
        writer_b.write_and_flush(_llama_start(b_started) + qwen)
        writer_a.wait_until_readable(len(serving))
        writer_b.wait_until_readable(3 + len(qwen))

        config = _config(
            prometheus.daemon_port, tmp_path / "state", writer_a.path.parent, writer_b.path.parent
        )
        async with running_daemon(config) as daemon:
            assert daemon.url.endswith(f":{prometheus.daemon_port}")
            # Prometheus must hold A's crash counter at 0 before the crash is counted:
            # increase() needs the 0 → 1 step between two samples.
            zero = (
                f'vllm_sentinel_unit_crashes_total{{host="{HOST_A}",unit="{UNIT_A}",'
                f'cause="{CAUSE_A}"}} == 0 and on (host, unit) '
                f'vllm_sentinel_unit_phase{{host="{HOST_A}",unit="{UNIT_A}",phase="ready"}} == 1'
            )
            await poll_async(
                lambda: prometheus.vector(zero),
                within=SCRAPE_DEADLINE,
                what="A ready with crashes_total 0 scraped",
            )

            # the incident: A restarted, crashes, restarts and loads; B loads then stalls
            _gpu_state(gpu_state, make_incident.B_WORKERS)
            writer_a.write_and_flush(
                _planned_stop_z(incident_start - timedelta(seconds=3)) + incident
            )
            writer_b.write_and_flush(
                _llama_load_then_silence(
                    max(
                        datetime.now(UTC) - timedelta(seconds=1), b_started + timedelta(seconds=0.5)
                    )
                )
            )

            crashed = await poll_async(
                lambda: _firing(prometheus, "VllmCrashed", unit=UNIT_A),
                within=ALERT_DEADLINE,
                what="VllmCrashed firing for A",
            )
            stalled = await poll_async(
                lambda: _firing(prometheus, "VllmLoadingStalled", unit=UNIT_B),
                within=ALERT_DEADLINE,
                what="VllmLoadingStalled firing for B",
            )
            slower = await poll_async(
                lambda: _firing(prometheus, "VllmStartupSlowerThanUsual", unit=UNIT_C),
                within=ALERT_DEADLINE,
                what="VllmStartupSlowerThanUsual firing for C",
            )

            # the alerts, as Prometheus evaluated them
            (crash,) = crashed
            expected = {
                "host": HOST_A,
                "unit": UNIT_A,
                "cause": CAUSE_A,
                "job": SCRAPE_JOB,
                "severity": "warning",
            }
            # labels that do not change while it fires; the latest crash's details annotate it
            assert {key: crash["labels"].get(key) for key in expected} == expected
            assert set(crash["labels"]) == {*expected, "alertname"}
            assert CAUSE_A in crash["annotations"]["summary"]
            description = crash["annotations"]["description"]
            assert "in phase loading_weights" in description
            assert "RuntimeError: flashinfer-cubin version (0.6.3)" in description
            # the runbook link: the sentinel Prometheus scrapes, its own /runbook, the anchor
            # that page has (the recording rule job:vllm_sentinel_runbook_url:info)
            runbook_url = crash["annotations"]["runbook_url"]
            assert runbook_url == f"{daemon.url}/runbook#vllmcrashed"
            page = (await daemon.get("/runbook")).decode()
            assert '<h2 id="vllmcrashed">' in page
            (stall,) = stalled
            assert {
                key: stall["labels"].get(key) for key in ("host", "unit", "phase", "severity")
            } == {
                "host": HOST_B,
                "unit": UNIT_B,
                "phase": "loading_weights",
                "severity": "critical",
            }
            assert "loading_weights" in stall["annotations"]["summary"]
            (slow,) = slower
            assert {key: slow["labels"].get(key) for key in ("host", "unit", "phase")} == {
                "host": HOST_B,
                "unit": UNIT_C,
                "phase": "compiling",
            }
            assert (
                "against a usual 1m 0s for this unit and model"
                in (slow["annotations"]["description"])
            )
            assert "Expected ready at" in slow["annotations"]["description"]
            # C's ETA through Prometheus: the history's later phases (compile overran)
            (eta,) = prometheus.vector(f'vllm_sentinel_unit_startup_eta_seconds{{unit="{UNIT_C}"}}')
            assert eta["metric"]["basis"] == "history"
            assert float(eta["value"][1]) == pytest.approx(C_AFTER_COMPILE)

            # every expression has data; the close cases stay quiet (blocking HTTP: a thread)
            assert await asyncio.to_thread(_expression_problems, prometheus) == []
            await asyncio.to_thread(_check_quiet, prometheus)

            # Alertmanager: routed by example.yml to the webhook, grouped by host and unit
            delivered = await asyncio.to_thread(
                webhook.wait_for,
                lambda alerts: (
                    _delivered(alerts, "VllmCrashed", host=HOST_A, unit=UNIT_A, cause=CAUSE_A)
                    and _delivered(alerts, "VllmLoadingStalled", host=HOST_B, unit=UNIT_B)
                    and _delivered(alerts, "VllmStartupSlowerThanUsual", host=HOST_B, unit=UNIT_C)
                ),
                DELIVERY_DEADLINE,
                "VllmCrashed, VllmLoadingStalled and VllmStartupSlowerThanUsual",
            )
            assert _delivered(delivered, "VllmCrashed", severity="warning")
            crashed = [
                alert
                for payload in webhook.payloads
                for alert in payload["alerts"]
                if alert["labels"]["alertname"] == "VllmCrashed"
            ]
            assert any("RuntimeError" in alert["annotations"]["description"] for alert in crashed)
            assert _delivered(
                delivered, "VllmLoadingStalled", phase="loading_weights", severity="critical"
            )
            payloads = [
                payload
                for payload in webhook.payloads
                if any(
                    a["labels"]["alertname"] in ("VllmCrashed", "VllmLoadingStalled")
                    for a in payload["alerts"]
                )
            ]
            assert {payload["receiver"] for payload in payloads} == {"vllm-oncall"}
            assert {tuple(sorted(payload["groupLabels"].items())) for payload in payloads} >= {
                (("host", HOST_A), ("unit", UNIT_A)),
                (("host", HOST_B), ("unit", UNIT_B)),
            }
            for payload in payloads:
                assert all(
                    alert["labels"]["unit"] == payload["groupLabels"]["unit"]
                    for alert in payload["alerts"]
                )
