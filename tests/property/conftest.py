"""Property, fuzz and soak tests: ``slow`` ones run in CI (``CI=true``) and on request.

Locally ``pytest`` stays fast: a test marked ``slow`` is skipped with a reason unless ``CI=true``
(what ``.ci/run`` sets), ``SENTINEL_SLOW=1``, or ``-m`` names ``slow``. Their size is bounded by
environment knobs (``SOAK_RECORDS``, ``FUZZ_SECONDS``) so that CI time stays predictable.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = (
        os.environ.get("CI") == "true"
        or os.environ.get("SENTINEL_SLOW") == "1"
        or "slow" in str(config.getoption("markexpr") or "")
    )
    if wanted:
        return
    skip = pytest.mark.skip(reason="slow: runs with CI=true, SENTINEL_SLOW=1 or -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
