"""Debian's Chromium, headless, driven by Playwright: the browser tests and the README's
screenshot script open their pages the same way.

Playwright only drives the system browser (``/usr/bin/chromium``): ``playwright install`` is
never run, nothing is downloaded. Each page gets a fresh user-data-dir (``profile``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_FLAGS", "chromium_page"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container: Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@contextlib.asynccontextmanager
async def chromium_page(
    async_playwright: Callable[[], Any], executable: str, profile: Path | str, **options: Any
) -> AsyncIterator[Any]:
    """A page of a headless Chromium (``executable``) on its own ``profile`` directory, closed
    afterwards; ``options`` go to Playwright's ``launch_persistent_context`` (viewport,
    color_scheme, http_credentials…)."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=list(CHROMIUM_FLAGS),
            headless=True,
            **options,
        )
        try:
            yield context.pages[0] if context.pages else await context.new_page()
        finally:
            await context.close()
