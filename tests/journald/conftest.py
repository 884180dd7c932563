"""The real-journald tier: one booted root where systemd, journald and the sentinel run for real.

``tier`` (one per module; a session's other tests never share it) builds, in this order:

* a ``BootedRoot`` (``tests/support/booted_root.py``): systemd as PID 1, logging to its own
  journal, in private mount, PID and network namespaces;
* vllm-sentinel **installed as a service** in it as docs/install.md's install does (a venv in
  ``/opt/vllm-sentinel`` from the session's wheelhouse, the system user in ``systemd-journal``,
  the shipped unit file, ``systemctl enable --now``) with a config that watches
  ``vllm-*.service`` (which matches its own unit, never watched: the test says so), counts a
  crash 5 s after its exit (``crash_settle_seconds``, 30 by default) and listens on the root's
  ``127.0.0.1:9842``;
* a webhook receiver, Alertmanager with ``deploy/alertmanager/example.yml`` and Prometheus with
  the shipped rules (``fast_rules``: ``for:`` of 1 s), all in the root's network namespace
  (``tests/support/netns.py``): the helpers of ``tests/e2e/conftest.py``, unchanged;
* then the scenario units (``tests/journald/scenarios.py``), all started at once so that their
  waits overlap: the tier costs about one scenario, not their sum.

Everything is local to the root's namespaces (fixed ports are fine: each root has its own
loopback), and the directories come from ``tmp_path_factory``: safe under pytest-xdist.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BuiltPackage, require_binary
from tests.e2e.conftest import (
    ALERTMANAGER_EXAMPLE,
    RULES,
    SCRAPE_JOB,
    ManagedProcess,
    WebhookReceiver,
    _handler_for,
    alertmanager_config,
    prometheus_config,
)
from tests.journald.scenarios import INTERPRETER_BINDS, SCENARIOS, start_all, unit_text
from tests.support.booted_root import BootedRoot, BootError
from tests.support.netns import NetnsThread
from tests.support.packaging import ROOT
from tests.support.promql import fast_rules

WHEELHOUSE = "/mnt/wheelhouse"
VENV = "/opt/vllm-sentinel"
CONFIG = "/etc/vllm-sentinel/config.toml"
SENTINEL = "http://127.0.0.1:9842"
HOST = "booted-root"
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093

_INSTALL = f"""set -euxo pipefail
/usr/bin/python3 -m venv {VENV}
{VENV}/bin/pip install -q vllm-sentinel
useradd --system --no-create-home --home-dir /var/lib/vllm-sentinel --shell /usr/sbin/nologin \\
    --groups systemd-journal vllm-sentinel
chgrp -R vllm-sentinel /etc/vllm-sentinel
chmod 0750 /etc/vllm-sentinel
{VENV}/bin/vllm-sentinel check-config {CONFIG}
install -m 0644 /mnt/checkout/deploy/systemd/vllm-sentinel.service /etc/systemd/system/
systemctl daemon-reload
systemctl enable --now vllm-sentinel
"""

_CONFIG = f"""[exporter]
listen = "127.0.0.1:9842"

[defaults]
unit_discovery_interval_seconds = 1.0
cursor_flush_interval_seconds = 0.5
crash_settle_seconds = 5

[[hosts]]
name = "{HOST}"
local = true
units = ["vllm-*.service"]
gpu = "none"
"""


def _http(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


@dataclass
class Tier:
    """The booted root with the sentinel, Prometheus and Alertmanager, and helpers to ask them."""

    root: BootedRoot
    net: NetnsThread
    webhook: WebhookReceiver
    prometheus_url: str
    started_at: float
    notes: dict[str, Any] = field(default_factory=dict)

    # --- systemd's own truth -------------------------------------------------------------

    def systemctl(self, *args: str) -> str:
        result = self.root.run(["systemctl", *args], timeout=60)
        return result.stdout.decode(errors="replace")

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """``systemctl show UNIT -p …`` as a dict."""
        text = self.systemctl("show", unit, *(f"--property={name}" for name in properties))
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def journal(self, unit: str, *matches: str) -> list[dict[str, Any]]:
        """Every entry ``journalctl -u UNIT`` shows (JSON) that has every ``FIELD=value``."""
        result = self.root.run(["journalctl", "-u", unit, "-o", "json", "-a", "--no-pager"])
        entries = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        wanted = [match.split("=", 1) for match in matches]
        return [entry for entry in entries if all(entry.get(k) == v for k, v in wanted)]

    def systemd_messages(self, unit: str, message_id: str) -> list[dict[str, Any]]:
        """systemd's (PID 1's) entries about ``unit`` with catalog id ``message_id``."""
        return [
            entry
            for entry in self.journal(unit, f"MESSAGE_ID={message_id}")
            if entry.get("_PID") == "1" and entry.get("UNIT") == unit
        ]

    # --- the sentinel --------------------------------------------------------------------

    def get(self, path: str) -> bytes:
        return self.net.call(lambda: _http(f"{SENTINEL}{path}"))

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.get("/status")))

    def unit(self, name: str) -> dict[str, Any] | None:
        """The unit's entry in ``/status``, or ``None`` while the sentinel has not seen it."""
        for unit in self.status()["units"]:
            if unit["unit"] == name:
                return dict(unit)
        return None

    def units(self) -> dict[str, Any]:
        """``/units``: the startup document of every unit."""
        return dict(json.loads(self.get("/units")))

    def metrics(self) -> str:
        return self.get("/metrics").decode()

    def wait(self, check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
        """Poll ``check`` until it returns something truthy (errors count as not yet)."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            try:
                result = check()
            except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
                last, result = error, None
            if result:
                return result
            if time.monotonic() > deadline:
                journal = self.root.run(
                    ["journalctl", "-u", "vllm-sentinel", "--no-pager", "-n", "30"]
                ).stdout.decode(errors="replace")
                raise AssertionError(
                    f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})"
                    f"\nsentinel's journal:\n{journal}"
                )
            time.sleep(0.25)

    # --- Prometheus ----------------------------------------------------------------------

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(self.net.call(lambda: _http(url)))
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real-journald tier runs as root in CI (scripts/test): {reason}")
    pytest.skip(reason)


def _unit_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory, built_package: BuiltPackage) -> Iterator[Tier]:
    """A booted root running the installed sentinel, Prometheus and Alertmanager (see above)."""
    if os.geteuid() != 0:
        _fail_or_skip("needs root (overlay mounts, namespaces, systemd as PID 1)")
    for binary in ("unshare", "nsenter", "/lib/systemd/systemd", "journalctl"):
        require_binary(binary)
    prometheus = require_binary("/usr/bin/prometheus")
    promtool = require_binary("/usr/bin/promtool")
    alertmanager = require_binary("/usr/bin/prometheus-alertmanager")
    base = tmp_path_factory.mktemp("journald-tier")
    started_at = time.monotonic()
    root = BootedRoot(
        base / "root",
        binds={
            WHEELHOUSE: built_package.wheelhouse,
            "/mnt/checkout": ROOT,
            **INTERPRETER_BINDS,  # the stand-in's interpreter, wherever the checkout is
        },
    )
    config = root.path(CONFIG)
    _unit_file(config, _CONFIG)
    for scenario in SCENARIOS:
        _unit_file(root.path(f"/etc/systemd/system/{scenario.unit}"), unit_text(scenario))
    try:
        root.start()
    except BootError as error:
        pytest.fail(str(error))
    managed: list[ManagedProcess] = []
    net: NetnsThread | None = None
    server: ThreadingHTTPServer | None = None
    try:
        installed = root.run(
            ["bash", "-c", _INSTALL],
            env={
                "PIP_NO_INDEX": "1",
                "PIP_FIND_LINKS": WHEELHOUSE,
                "PIP_CONFIG_FILE": "/dev/null",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "VLLM_SENTINEL_PURE": "1",
            },
            timeout=300,
        )
        log = (installed.stdout + installed.stderr).decode(errors="replace")
        assert installed.returncode == 0, log[-5000:]
        assert root.pid is not None
        net = NetnsThread(root.pid)
        receiver = WebhookReceiver()
        server = net.call(lambda: ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(receiver)))
        server.daemon_threads = True
        receiver.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()

        am_dir = base / "alertmanager"
        am_dir.mkdir()
        (am_dir / "alertmanager.yml").write_text(
            yaml.safe_dump(alertmanager_config(receiver.url)), encoding="utf-8"
        )
        assert ALERTMANAGER_EXAMPLE.exists()
        managed.append(
            ManagedProcess.start(
                "alertmanager",
                net.command(
                    [
                        alertmanager,
                        f"--config.file={am_dir / 'alertmanager.yml'}",
                        f"--storage.path={am_dir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{ALERTMANAGER_PORT}",
                        "--cluster.listen-address=",
                    ]
                ),
                am_dir / "alertmanager.log",
            )
        )
        prom_dir = base / "prometheus"
        prom_dir.mkdir()
        rules = fast_rules(RULES, prom_dir / "rules.yml", for_seconds=1)
        checked = subprocess.run(
            [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stderr
        document = prometheus_config(9842, f"http://127.0.0.1:{ALERTMANAGER_PORT}", rules)
        (prom_dir / "prometheus.yml").write_text(yaml.safe_dump(document), encoding="utf-8")
        managed.append(
            ManagedProcess.start(
                "prometheus",
                net.command(
                    [
                        prometheus,
                        f"--config.file={prom_dir / 'prometheus.yml'}",
                        f"--storage.tsdb.path={prom_dir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                    ]
                ),
                prom_dir / "prometheus.log",
            )
        )
        tier = Tier(root, net, receiver, f"http://127.0.0.1:{PROMETHEUS_PORT}", started_at)
        tier.wait(lambda: tier.get("/healthz"), "the sentinel's /healthz", timeout=60)
        for process in managed:
            process.check_alive()
        # as on a host, Prometheus already scrapes the sentinel when the units start
        tier.wait(
            lambda: tier.query(f'up{{job="{SCRAPE_JOB}"}} == 1'), "Prometheus scraping", timeout=60
        )
        drivers = start_all(tier)
        tier.notes["drivers"] = drivers
        yield tier
        for driver in drivers.values():
            driver.join(120)
    finally:
        for process in reversed(managed):
            process.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        root.stop()
        if net is not None:
            net.close()
