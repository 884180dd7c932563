"""Session fixtures for end-to-end tests: a real Prometheus and Alertmanager on 127.0.0.1.

* ``daemon_port``: the port the test's vllm-sentinel will listen on, chosen before Prometheus
  starts so that its scrape target is known up front.
* ``webhook``: a tiny HTTP server in a thread that records every JSON payload POSTed to it
  (Alertmanager's webhook receiver).
* ``alertmanager``: ``prometheus-alertmanager`` with ``deploy/alertmanager/example.yml``, its
  receiver URL pointed at ``webhook`` and its timers shortened (``group_wait: 0s``).
* ``prometheus``: ``prometheus`` scraping ``daemon_port`` every second, evaluating a
  ``fast_rules`` copy of ``deploy/prometheus/vllm-sentinel-rules.yml`` every second and sending
  alerts to ``alertmanager``. Started once per session: its first scrape takes ~5 s.

Each fixture checks its ports are free first (a stale Prometheus from a killed run would
otherwise answer in place of ours), waits for readiness by polling with a deadline, and stops
its process in ``finally``. Processes write their logs to files whose tails appear in failures.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_binary
from tests.support.daemon import free_port
from tests.support.http_errors import closed
from tests.support.promql import fast_rules

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "example.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "vllm-sentinel.json"
SCRAPE_JOB = "vllm-sentinel"  # the job name the rules' absent-target alerts rely on
STARTUP_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


# --- small helpers ---------------------------------------------------------------------------


def assert_port_free(port: int) -> None:
    """Fail unless nothing listens on 127.0.0.1:``port`` (a stale server from a killed run)."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"127.0.0.1:{port} is already in use: a stale server from an earlier run?")


def poll(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds.

    The interval only paces the polling; the deadline is what bounds the wait.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
        except (OSError, ValueError) as error:  # not listening yet, half-written answer
            last_error, result = closed(error), None
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


async def poll_async(
    check: Callable[[], Any], *, within: float, what: str, interval: float = 0.1
) -> Any:
    """``poll`` for async tests: ``check`` (blocking HTTP) runs in a thread, the loop stays free.

    The daemon under test runs in the test's event loop, so a blocking wait would freeze it.
    """
    deadline = time.monotonic() + within
    last_error: BaseException | None = None
    while True:
        try:
            result = await asyncio.to_thread(check)
        except (OSError, ValueError) as error:
            last_error, result = closed(error), None
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}{detail}")
        await asyncio.sleep(interval)


def http_json(url: str, data: bytes | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """GET (or POST ``data``) ``url`` and decode the JSON answer, error statuses included.

    Prometheus answers a bad query with HTTP 400 and a JSON body (``errorType: bad_data``):
    that body is returned, not raised, so that tests can report it.
    """
    request = urllib.request.Request(url, data=data)
    if data is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        with error:
            body = error.read()
        if not body.startswith(b"{"):
            raise
    return dict(json.loads(body))


def _log_tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


@dataclass
class ManagedProcess:
    """A child process with its log file; ``stop`` terminates it (then kills) and waits."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, argv: list[str], log: Path) -> ManagedProcess:
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        return cls(name, process, log)

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            pytest.fail(f"{self.name} exited with {code}:\n{_log_tail(self.log)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- webhook receiver ------------------------------------------------------------------------


@dataclass
class WebhookReceiver:
    """Collects the JSON payloads Alertmanager POSTs (one per notification)."""

    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/vllm-sentinel"
    payloads: list[dict[str, Any]] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def record(self, payload: dict[str, Any]) -> None:
        with self._changed:
            self.payloads.append(payload)
            self._changed.notify_all()

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every notification so far, in arrival order."""
        with self._changed:
            return [alert for payload in self.payloads for alert in payload.get("alerts", [])]

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str
    ) -> list[dict[str, Any]]:
        """Block until ``predicate(alerts)`` holds (woken by each POST) or fail at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                alerts = [a for payload in self.payloads for a in payload.get("alerts", [])]
                if predicate(alerts):
                    return alerts
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = sorted(
                        {
                            (a["labels"].get("alertname"), a["labels"].get("unit"), a["status"])
                            for a in alerts
                        },
                        key=str,
                    )
                    raise AssertionError(f"webhook: timed out waiting for {what}; got {seen}")
                self._changed.wait(left)


def _handler_for(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            status = 200 if self.path == receiver.path else 404
            if status == 200:
                receiver.record(json.loads(body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep pytest's output clean

    return Handler


@pytest.fixture(scope="session")
def webhook() -> Iterator[WebhookReceiver]:
    """An HTTP server on 127.0.0.1 recording Alertmanager's webhook notifications."""
    receiver = WebhookReceiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(receiver))
    server.daemon_threads = True
    receiver.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(STOP_TIMEOUT)


# --- Alertmanager ----------------------------------------------------------------------------


@dataclass
class Alertmanager:
    url: str
    managed: ManagedProcess
    config: Path


def alertmanager_config(receiver_url: str) -> dict[str, Any]:
    """``deploy/alertmanager/example.yml`` with its webhook at ``receiver_url`` and quick timers.

    The routing tree, matchers, grouping and inhibitions stay as shipped; only waits shrink so
    a test sees the first notification at once (``group_wait: 0s``) and later alerts of the
    same group after a second (``group_interval: 1s``).
    """
    config = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text(encoding="utf-8"))

    def shorten(route: dict[str, Any]) -> None:
        if "group_wait" in route:
            route["group_wait"] = "0s"
        if "group_interval" in route:
            route["group_interval"] = "1s"
        for child in route.get("routes", []):
            shorten(child)

    config["route"]["group_wait"] = "0s"
    config["route"]["group_interval"] = "1s"
    shorten(config["route"])
    webhooks = [
        hook for receiver in config["receivers"] for hook in receiver.get("webhook_configs", [])
    ]
    assert webhooks, "deploy/alertmanager/example.yml has no webhook receiver to redirect"
    for hook in webhooks:
        hook["url"] = receiver_url
    return dict(config)


@pytest.fixture(scope="session")
def alertmanager(
    webhook: WebhookReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Alertmanager]:
    """A real Alertmanager on 127.0.0.1 (no cluster listener) delivering to ``webhook``."""
    binary = require_binary("/usr/bin/prometheus-alertmanager")
    directory = tmp_path_factory.mktemp("alertmanager")
    config = directory / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(webhook.url)), encoding="utf-8")
    port = free_port()
    assert_port_free(port)
    storage = directory / "data"
    storage.mkdir()
    managed = ManagedProcess.start(
        "alertmanager",
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        directory / "alertmanager.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            managed.check_alive()
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)

        poll(ready, timeout=STARTUP_TIMEOUT, what="alertmanager /-/ready")
        # ours, not a stale one: it serves the config file we wrote
        status = http_json(f"{url}/api/v2/status")
        assert webhook.url in status["config"]["original"], "another Alertmanager answered"
        yield Alertmanager(url, managed, config)
    finally:
        managed.stop()


# --- Prometheus ------------------------------------------------------------------------------


@dataclass
class Prometheus:
    """A running Prometheus and thin clients for its HTTP API."""

    url: str
    managed: ManagedProcess
    rules_file: Path
    daemon_port: int

    def api(self, path: str, **params: str) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return http_json(f"{self.url}/api/v1/{path}{query}")

    def query(self, expr: str) -> dict[str, Any]:
        """Run an instant query (POSTed: expressions are long); return the whole JSON answer."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        return http_json(f"{self.url}/api/v1/query", data=data)

    def vector(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query; fail with Prometheus' error if it is rejected."""
        answer = self.query(expr)
        if answer.get("status") != "success":
            pytest.fail(
                f"Prometheus rejected {expr!r}: {answer.get('errorType')}: {answer.get('error')}"
            )
        return list(answer["data"]["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["data"]["alerts"])

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["data"]["groups"])


def prometheus_config(daemon_port: int, alertmanager_url: str, rules_file: Path) -> dict[str, Any]:
    """Scrape the daemon and evaluate the rules every second; alert to ``alertmanager_url``."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "alerting": {
            "alertmanagers": [
                {"static_configs": [{"targets": [alertmanager_url.removeprefix("http://")]}]}
            ]
        },
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}],
            }
        ],
    }


@pytest.fixture(scope="session")
def daemon_port() -> int:
    """The port vllm-sentinel will listen on (Prometheus scrapes it from the start)."""
    port = free_port()
    assert_port_free(port)
    return port


@pytest.fixture(scope="session")
def prometheus(
    daemon_port: int, alertmanager: Alertmanager, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """A real Prometheus on 127.0.0.1, already scraping ``daemon_port`` when it is yielded.

    It waits for the first scrape of the (not yet running) daemon to be queryable
    (``up == 0``), which takes ~5 s after start whatever the scrape interval.
    """
    binary = require_binary("/usr/bin/prometheus")
    promtool = require_binary("/usr/bin/promtool")
    directory = tmp_path_factory.mktemp("prometheus")
    rules_file = fast_rules(RULES, directory / "rules.yml", for_seconds=1)
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, f"fast rules copy is invalid:\n{checked.stderr}"
    config = directory / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(prometheus_config(daemon_port, alertmanager.url, rules_file)),
        encoding="utf-8",
    )
    port = free_port()
    assert_port_free(port)
    storage = directory / "data"
    managed = ManagedProcess.start(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        directory / "prometheus.log",
    )
    server = Prometheus(f"http://127.0.0.1:{port}", managed, rules_file, daemon_port)
    try:

        def ready() -> bool:
            managed.check_alive()
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)

        poll(ready, timeout=STARTUP_TIMEOUT, what="prometheus /-/ready")
        flags = server.api("status/flags")["data"]
        assert flags["storage.tsdb.path"] == str(storage), "another Prometheus answered"

        def first_scrape() -> bool:
            managed.check_alive()
            return bool(server.vector(f'up{{job="{SCRAPE_JOB}"}}'))

        poll(first_scrape, timeout=STARTUP_TIMEOUT, what="the first scrape (up series)")
        yield server
    finally:
        managed.stop()
