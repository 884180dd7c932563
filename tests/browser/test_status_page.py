"""The status page in a real browser: headless Chromium against the real daemon, fed by a real
journal file (systemd-journal-remote), behind basic auth.

A person looking at the page sees a unit loading weights with its progress, a crashed unit
with its cause and fix hint (its exception message carries a ``<script>``, shown as text), and
a host whose journal collector is down. A new journal record changes the page in place (no
navigation); without credentials the page is refused; without JavaScript it is a plain table;
on a phone in dark mode it fits the screen in the dashboard's dark phase colours. Each state
is saved as a screenshot under ``tmp/artifacts/browser/`` (not committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Browse
from tests.support.daemon import free_port, local_config, running_daemon
from tests.support.fake_vllm import FakeVllmServer
from tests.support.http_client import basic, bcrypt_hash, fetch
from tests.support.journal_writer import (
    JournalWriter,
    LogClock,
    service_line,
    unit_failed,
    unit_started,
)
from vllm_sentinel.config import parse_config

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

USER, PASSWORD = "viewer", "page password 1"
LOADING, CRASHED = "vllm-llama.service", "vllm-kimi.service"
A, B = "a" * 32, "b" * 32
HOSTILE = "<script>document.title='pwned';alert(1)</script>"
FLASHINFER = (
    "flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.4). Please install "
    f"the same version of both packages. {HOSTILE}"
)
SECONDS = 10.0  # deadline of each wait for the page or the daemon (polled, never slept)


@dataclass
class Scene:
    """The running daemon, its journal, and the log clock of the story."""

    url: str
    writer: JournalWriter
    clock: LogClock

    def us(self, seconds: float) -> int:
        return self.clock.us(seconds)

    def status(self) -> dict[str, Any]:
        reply = fetch(self.url + "/status", headers=basic(USER, PASSWORD))
        assert reply.status == 200, reply
        return dict(reply.json())


def _story(scene: Scene) -> list[dict[str, str | bytes | int]]:
    """One unit loading (32 of 64 shards), one crashed on the flashinfer mismatch."""
    us = scene.us
    return [
        unit_started(LOADING, A, us(0), "vLLM"),
        service_line(
            LOADING,
            A,
            1000,
            "INFO 11-29 10:00:10 [api_server.py:1043] vLLM API server version 0.17.1",
            us(1),
        ),
        service_line(
            LOADING,
            A,
            1000,
            "(Worker_TP0 pid=1000) INFO 11-29 10:00:21 "
            "[gpu_model_runner.py:3425] Starting to load model /models/llama-405b...",
            us(2),
        ),
        service_line(
            LOADING,
            A,
            1000,
            "(Worker_TP0 pid=1000) \rLoading safetensors checkpoint shards: "
            " 50% Completed | 32/64 [04:30<04:30, 8.4s/it]",
            us(3),
        ),
        unit_started(CRASHED, B, us(0), "vLLM"),
        service_line(
            CRASHED,
            B,
            2000,
            "(Worker_TP0 pid=2000) INFO 11-29 10:00:21 "
            "[gpu_model_runner.py:3425] Starting to load model /shared/kimi...",
            us(2),
        ),
        *(
            service_line(
                CRASHED,
                B,
                2000,
                f"(Worker_TP7 pid=2000) ERROR 11-29 10:00:40 [multiproc_executor.py:783] {text}",
                us(4),
            )
            for text in (
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/v1/worker.py", line 1, in load',
                f"RuntimeError: {FLASHINFER}",
            )
        ),
        *unit_failed(CRASHED, B, us(5)),
    ]


async def _until(check: Any, what: str) -> Any:
    deadline = time.monotonic() + SECONDS
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def sentinel(tmp_path: Path, writer: JournalWriter) -> AsyncIterator[Scene]:
    """The daemon with two hosts: ``llm-two`` follows the journal file, ``llm-down`` names a
    journal directory that does not exist (its collector stays down). Basic auth is on."""
    scene = Scene("", writer, LogClock(timedelta(seconds=60)))
    entries = _story(scene)
    writer.write_readable(entries)
    web = tmp_path / "web.yml"
    hashed = bcrypt_hash(PASSWORD)
    web.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n", encoding="utf-8")
    hosts = "".join(
        f"""
[[hosts]]
name = "{name}"
local = true
units = ["vllm-*.service"]
journalctl_args = ["--directory={directory}"]
gpu = "none"
"""
        for name, directory in (("llm-two", writer.path.parent), ("llm-down", tmp_path / "none"))
    )
    config = parse_config(
        f"""
[exporter]
listen = "127.0.0.1:{free_port()}"
web_config_file = "{web}"
[defaults]
state_directory = "{tmp_path / "state"}"
{hosts}"""
    )
    async with running_daemon(config) as daemon:
        scene.url = daemon.url

        def ready() -> bool:
            status = scene.status()
            units = {unit["unit"]: unit for unit in status["units"]}
            down = next(host for host in status["hosts"] if host["host"] == "llm-down")
            journal = down["collectors"].get("journal", {})
            return (
                {LOADING, CRASHED} <= set(units)
                and units[CRASHED]["last_crash"] is not None
                and not journal.get("up", True)
                and journal.get("reason") != "starting"
            )

        await _until(ready, "the daemon to know both units and the down collector")
        yield scene


def _credentials() -> dict[str, Any]:
    return {"http_credentials": {"username": USER, "password": PASSWORD}}


async def _row(page: Any, unit: str) -> Any:
    return page.locator(f'tr[data-key="unit:llm-two/{unit}"]')


async def test_a_person_sees_loading_crashed_and_collector_down(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """Progress of the loading unit, the crashed unit's cause, exception and fix, and the
    host whose collector is down: as rendered text, with log text that stays text."""
    async with sentinel(tmp_path, journal_writer) as scene, browse(**_credentials()) as page:
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        response = await page.goto(scene.url + "/")
        assert response.status == 200
        await page.screenshot(path=artifacts / "overview.png", full_page=True)

        loading = await _row(page, LOADING)
        bar = loading.locator("progress")
        assert (await bar.get_attribute("value"), await bar.get_attribute("max")) == ("32", "64")
        assert await loading.locator(".phase").inner_text() == "loading_weights"
        assert "32/64 shards (50%)" in await loading.inner_text()
        # no history: tqdm's rest of the shard bar only, a lower bound with no firm ready time
        eta = await loading.locator(".fact-eta").inner_text()
        assert re.fullmatch(r"ETA ≥ \d+m\d\ds, this phase's bar only", eta), eta
        assert "ready at" not in await loading.inner_text()
        await loading.screenshot(path=artifacts / "loading.png")

        crashed = await _row(page, CRASHED)
        text = await crashed.inner_text()
        assert await crashed.locator(".phase").inner_text() == "crashed"
        assert "dependency_mismatch in loading_weights" in text
        assert f"RuntimeError: {FLASHINFER[:60]}" in text
        assert "Fix: pip install flashinfer-cubin==0.6.4: flashinfer-cubin 0.6.3 must match" in text
        assert HOSTILE in await crashed.locator(".exception").get_attribute("title")
        href = await crashed.locator(".cause a").get_attribute("href")
        assert href == "runbook#dependency_mismatch"  # the daemon's own /runbook
        await crashed.screenshot(path=artifacts / "crashed.png")

        down = page.locator('[data-key="host:llm-down"]')
        down_text = await down.inner_text()
        assert "journal: DOWN" in down_text
        assert "The journal collector is down: the phases below are the last known" in down_text
        await down.screenshot(path=artifacts / "collector-down.png")

        # the hostile message was text, never markup: no dialog, title untouched
        assert dialogs == []
        assert await page.title() == "(1 crashed) vllm-sentinel"
        assert await page.locator("tbody script").count() == 0


async def test_a_phase_change_updates_the_page_in_place(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """A new journal record moves the loading unit to compiling: the row changes without a
    reload (the page's own state survives, no navigation happens)."""
    async with sentinel(tmp_path, journal_writer) as scene, browse(**_credentials()) as page:
        await page.goto(scene.url + "/?refresh=1")
        navigations: list[str] = []
        page.on("framenavigated", lambda frame: navigations.append(frame.url))
        await page.evaluate("window.sentinelMarker = 42")
        loading = await _row(page, LOADING)
        assert await loading.locator(".phase").inner_text() == "loading_weights"
        await page.screenshot(path=artifacts / "before.png", full_page=True)

        scene.writer.write_and_flush(
            [
                service_line(
                    LOADING,
                    A,
                    1000,
                    "(Worker_TP0 pid=1000) INFO 11-29 10:09:35 "
                    "[backends.py:430] Dynamo bytecode transform time: 13.06 s",
                    scene.us(50),
                ),
            ]
        )
        await page.locator(f'tr[data-key="unit:llm-two/{LOADING}"] .phase-compiling').wait_for(
            timeout=SECONDS * 1000
        )
        assert await loading.locator(".phase").inner_text() == "compiling"
        assert await loading.locator("progress").count() == 0  # no bar once weights are in
        assert await page.evaluate("window.sentinelMarker") == 42
        assert navigations == []
        crashed = await _row(page, CRASHED)
        assert "Fix: pip install flashinfer-cubin==0.6.4" in await crashed.inner_text()
        await page.screenshot(path=artifacts / "after.png", full_page=True)


async def test_the_page_needs_credentials(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """Without credentials, or with a wrong password, the server answers 401 and the browser
    shows no unit (headless Chromium cannot prompt: it ends the navigation)."""
    async with sentinel(tmp_path, journal_writer) as scene:
        wrong = {"http_credentials": {"username": USER, "password": PASSWORD + "x"}}
        for options in ({}, wrong):
            async with browse(**options) as page:
                try:  # no credentials to give: the navigation ends; wrong ones: the 401 page
                    outcome = f"HTTP {(await page.goto(scene.url + '/')).status}"
                except Exception as error:  # playwright's Error
                    outcome = str(error)
                assert outcome == "HTTP 401" or "net::ERR_INVALID_AUTH_CREDENTIALS" in outcome
                await page.wait_for_load_state()
                for path in ("/", "/?part=main", "/static/status.js"):
                    answer = await page.request.get(scene.url + path)
                    assert answer.status == 401
                    assert LOADING not in await answer.text()
                await page.screenshot(path=artifacts / f"refused-{len(options)}.png")


async def test_the_page_works_without_javascript(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """JavaScript off: the same table, rendered by the server, and a <noscript> reload."""
    async with (
        sentinel(tmp_path, journal_writer) as scene,
        browse(java_script_enabled=False, **_credentials()) as page,
    ):
        response = await page.goto(scene.url + "/")
        assert response.status == 200
        loading = await _row(page, LOADING)
        assert "32/64 shards (50%)" in await loading.inner_text()
        crashed = await _row(page, CRASHED)
        assert "Fix: pip install flashinfer-cubin==0.6.4" in await crashed.inner_text()
        # without scripting, <noscript> is parsed as markup: its meta reloads the page
        refresh = page.locator('noscript meta[http-equiv="refresh"]')
        assert await refresh.get_attribute("content") == "15"
        await page.screenshot(path=artifacts / "no-javascript.png", full_page=True)


async def test_the_page_fits_a_phone_in_dark_mode(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """A 390 px wide screen: no sideways scrolling, each unit a card; dark palette, with the
    dashboard's dark-theme phase colour."""
    phone = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2}
    async with (
        sentinel(tmp_path, journal_writer) as scene,
        browse(color_scheme="dark", is_mobile=True, **phone, **_credentials()) as page,
    ):
        await page.goto(scene.url + "/")
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(17, 18, 23)"
        pill = (await _row(page, LOADING)).locator(".phase")
        assert await pill.evaluate("e => getComputedStyle(e).backgroundColor") == (
            "rgb(87, 148, 242)"  # Grafana's "blue" in its dark theme
        )
        display = await (await _row(page, LOADING)).evaluate("e => getComputedStyle(e).display")
        assert display == "block"  # a card, not a table row
        await page.screenshot(path=artifacts / "phone-dark.png", full_page=True)


PROBED, PENDING = "vllm-qwen.service", "vllm-mixtral.service"
C, D = "c" * 32, "d" * 32


def _probed_story(clock: LogClock, port: int) -> list[dict[str, str | bytes | int]]:
    """One unit whose logs say ready (its API server on ``port``), one that crashed while its
    traceback is still open (header and a frame, no exception line yet: cause pending)."""
    api = "(APIServer pid=3000) INFO 11-29 10:00:20 [api_server.py:1] "
    return [
        unit_started(PROBED, C, clock.us(0), "vLLM"),
        service_line(
            PROBED, C, 3000, api + f"Starting vLLM server on http://127.0.0.1:{port}", clock.us(20)
        ),
        service_line(PROBED, C, 3000, "INFO:     Application startup complete.", clock.us(21)),
        unit_started(PENDING, D, clock.us(0), "vLLM"),
        service_line(
            PENDING,
            D,
            4000,
            "(Worker_TP0 pid=4000) INFO 11-29 10:00:21 "
            "[gpu_model_runner.py:3425] Starting to load model /models/mixtral...",
            clock.us(2),
        ),
        *(
            service_line(
                PENDING,
                D,
                4000,
                f"(Worker_TP0 pid=4000) ERROR 11-29 10:00:40 [multiproc_executor.py:783] {text}",
                clock.us(4),
            )
            for text in (
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3/dist-packages/vllm/v1/worker.py", line 1, in load',
            )
        ),
        *unit_failed(PENDING, D, clock.us(5)),
    ]


@contextlib.asynccontextmanager
async def probed_sentinel(tmp_path: Path, writer: JournalWriter) -> AsyncIterator[str]:
    """The daemon probing ``/health`` of a stand-in vLLM that answers 503 (its engine died),
    with the story of ``_probed_story``; yields its URL once the unit is unhealthy."""
    with FakeVllmServer("unavailable") as vllm:
        writer.write_readable(_probed_story(LogClock(timedelta(seconds=60)), vllm.port))
        config = local_config(
            writer.path.parent,
            tmp_path / "state",
            host_extra="[hosts.health_probe]\nenabled = true\ninterval_seconds = 0.5\n"
            "timeout_seconds = 0.5\nunhealthy_after_seconds = 1.0",
        )
        async with running_daemon(config) as daemon:

            def unhealthy() -> bool:
                units = {
                    unit["unit"]: unit for unit in fetch(daemon.url + "/status").json()["units"]
                }
                return bool(
                    units.get(PROBED, {}).get("unhealthy")
                    and (units.get(PENDING, {}).get("last_crash") or {}).get("cause") == "pending"
                    and units[PROBED]["health"]["failures"] >= 3
                )

            await _until(unhealthy, "the probed unit to turn unhealthy")
            yield daemon.url


async def test_ready_but_failing_health_is_said_in_words(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """Ready per its logs while /health answers 503: the row says so (since when, how many
    failures, why), the summary counts it unhealthy, not ready."""
    async with probed_sentinel(tmp_path, journal_writer) as url, browse() as page:
        await page.goto(url + "/")
        row = page.locator(f'tr[data-key="unit:llm-two/{PROBED}"]')
        assert await row.locator(".phase").inner_text() == "ready"
        assert await row.locator(".flag-unhealthy").inner_text() == "unhealthy"
        state = await row.locator(".health-state").inner_text()
        assert re.fullmatch(
            r"ready, but /health failing since \d\d:\d\d:\d\d UTC \(\d+ failures\): HTTP 503",
            state,
        ), state
        assert int(re.search(r"\((\d+) failures", state)[1]) >= 3  # type: ignore[index]
        summary = await page.locator(".summary").inner_text()
        assert "1 unhealthy" in summary and "ready" not in summary.split("as of")[0]
        await row.screenshot(path=artifacts / "unhealthy.png")


async def test_a_crash_still_settling_is_pending_not_zero_crashes(
    tmp_path: Path, journal_writer: JournalWriter, browse: Browse, artifacts: Path
) -> None:
    """A crash whose traceback is still arriving: its cause shows as pending, and the day's
    count says it is not counted yet instead of '0 crashes'."""
    async with probed_sentinel(tmp_path, journal_writer) as url, browse() as page:
        await page.goto(url + "/")
        row = page.locator(f'tr[data-key="unit:llm-two/{PENDING}"]')
        assert await row.locator(".phase").inner_text() == "crashed"
        crash = await row.locator("td.crash").inner_text()
        assert "pending in loading_weights" in crash
        assert "cause pending: only a wrapper or a signal so far, the traceback may still be " \
            "arriving; not counted until its cause is settled" in crash  # fmt: skip
        day = await row.locator('td[data-label="Last 24 h"]').inner_text()
        assert day == "1 start · 0 crashes counted + 1 settling", day
        await row.screenshot(path=artifacts / "pending.png")
