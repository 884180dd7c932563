"""Fixtures for browser tests: real journal files (shared with the integration tests) and a
headless Chromium driven by Playwright.

Debian's ``chromium`` is the browser (``/usr/bin/chromium``); Playwright only drives it (no
browser download: ``playwright install`` is never run). Locally a missing browser or Playwright
skips the tests; under ``CI=true`` it fails them, like every other real binary.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_binary
from tests.integration.conftest import journal_remote, journal_writer, journalctl
from tests.support.chromium import CHROMIUM, chromium_page

__all__ = ["journal_remote", "journal_writer", "journalctl"]  # fixtures, shared

ROOT = Path(__file__).resolve().parents[2]
Browse = Callable[..., contextlib.AbstractAsyncContextManager[Any]]


def _playwright() -> Any:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is required in CI (the test extra installs it)")
        pytest.skip("playwright not installed")
    return async_playwright


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """Where this test saves its screenshots (``tmp/artifacts/browser/<test>``, not committed;
    ``VLLM_SENTINEL_ARTIFACTS`` moves it)."""
    base = Path(os.environ.get("VLLM_SENTINEL_ARTIFACTS", ROOT / "tmp" / "artifacts"))
    folder = base / "browser" / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browse(tmp_path: Path) -> Browse:
    """``async with browse(**context_options) as page``: a page in a fresh headless Chromium
    (its own new user-data-dir), closed afterwards."""
    chromium = require_binary(CHROMIUM)
    async_playwright = _playwright()
    profiles = iter(range(1_000))

    @contextlib.asynccontextmanager
    async def open_page(**options: Any) -> AsyncIterator[Any]:
        profile = tmp_path / f"chromium-profile-{next(profiles)}"
        async with chromium_page(async_playwright, chromium, profile, **options) as page:
            yield page

    return open_page
