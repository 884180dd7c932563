"""The chaos test runs in CI (``CI=true``), on request (``SENTINEL_SLOW=1``, ``-m slow``), or
for one seed (``CHAOS_SEED=N``); locally ``pytest`` skips it with a reason."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = (
        os.environ.get("CI") == "true"
        or os.environ.get("SENTINEL_SLOW") == "1"
        or bool(os.environ.get("CHAOS_SEED"))
        or "slow" in str(config.getoption("markexpr") or "")
    )
    if wanted:
        return
    skip = pytest.mark.skip(
        reason="slow: runs with CI=true, SENTINEL_SLOW=1, CHAOS_SEED or -m slow"
    )
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
