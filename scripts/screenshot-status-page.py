#!/usr/bin/env python3
"""Regenerate docs/status-page.png: the status page of `vllm-sentinel demo`, in headless Chromium.

Runs the demo in-process on a free port, waits (polling /status) until the page tells the
demo's whole story at once — Kimi loading its weights after the flashinfer crash (with the fix
hint), Qwen's KV cache crash, the stalled Llama load — and saves a screenshot of the page as
Debian's Chromium draws it. The README shows that file; rerun this after changing the page.

    python scripts/screenshot-status-page.py                      # docs/status-page.png
    python scripts/screenshot-status-page.py --output /tmp/page.png --color-scheme dark

Needs `chromium` (Debian) and `pip install playwright`; Playwright only drives the system
browser (no `playwright install`, no download), opened as the browser tests open it
(`tests/support/chromium.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.chromium import CHROMIUM, chromium_page  # noqa: E402
from tests.support.daemon import free_port  # noqa: E402
from vllm_sentinel.demo import run_demo  # noqa: E402
from vllm_sentinel.log import configure_logging  # noqa: E402

KIMI, QWEN, LLAMA = "vllm-kimi-k25.service", "vllm-qwen-14b.service", "vllm-llama-405b.service"


def _status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/status", timeout=5) as response:
        return dict(json.loads(response.read()))


def _whole_story(status: dict[str, Any]) -> bool:
    """Kimi loading (past a quarter) after its crash, Qwen's crash known, Llama stalled."""
    units = {unit["unit"]: unit for unit in status.get("units", [])}
    if not {KIMI, QWEN, LLAMA} <= set(units):
        return False
    kimi = units[KIMI]
    current = kimi["incarnations"][-1]
    phase = current["phases"][-1]["phase"]
    ratio = current["progress"]["weights_loaded_ratio"] or 0.0
    return (
        phase == "loading_weights"
        and 0.25 <= ratio < 1.0
        and kimi["last_crash"] is not None
        and units[QWEN]["last_crash"] is not None
        and units[LLAMA]["stalled"] is True
    )


async def _wait(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if _whole_story(await asyncio.to_thread(_status, url)):
                return
        except OSError:
            pass  # not serving yet
        await asyncio.sleep(0.2)
    raise SystemExit(f"the demo did not reach the wanted state within {seconds:g} s")


async def capture(output: Path, chromium: str, color_scheme: str, width: int) -> None:
    from playwright.async_api import async_playwright

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    demo = asyncio.create_task(run_demo("127.0.0.1", port, announce=lambda line: None))
    try:
        await _wait(url, seconds=300.0)
        with tempfile.TemporaryDirectory(prefix="sentinel-chromium-") as profile:
            async with chromium_page(
                async_playwright,
                chromium,
                profile,
                viewport={"width": width, "height": 800},
                color_scheme=color_scheme,
            ) as page:
                await page.goto(url + "/")
                output.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(output), full_page=True)
    finally:
        demo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await demo
    print(f"wrote {output}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "status-page.png")
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument("--color-scheme", choices=["light", "dark"], default="light")
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args(argv)
    configure_logging("console", "error")  # the demo's own events are not this script's output
    asyncio.run(capture(args.output, args.chromium, args.color_scheme, args.width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
