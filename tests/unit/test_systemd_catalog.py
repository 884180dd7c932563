"""systemd's message catalog is the truth for the MESSAGE_IDs the sentinel relies on.

Every ``MESSAGE_ID`` the sentinel matches or queries must be one systemd writes: the catalog
shipped with systemd (``/usr/lib/systemd/catalog/systemd.catalog``, one ``-- ID`` line per
message) lists them. An id that is not there never matches a real journal: a wrong
``STARTED_MESSAGE_ID`` made the backfill's window query (``journalctl MESSAGE_ID=…``) find no
start on a real host, while the test journals, written with the same wrong id, agreed with it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.support import journal_writer
from vllm_sentinel.engine.catalog.markers import SYSTEMD_MARKERS
from vllm_sentinel.sources.journal import STARTED_MESSAGE_ID

CATALOG = Path("/usr/lib/systemd/catalog/systemd.catalog")


@pytest.fixture(scope="module")
def catalog_ids() -> set[str]:
    if not CATALOG.exists():
        require_binary("/lib/systemd/systemd")  # skip locally, fail in CI, as for binaries
        pytest.fail(f"{CATALOG} is missing although systemd is installed")
    return set(re.findall(r"^-- ([0-9a-f]{32})$", CATALOG.read_text(encoding="utf-8"), re.M))


def test_every_systemd_marker_id_is_in_systemds_catalog(catalog_ids: set[str]) -> None:
    ids = {row.message_id for row in SYSTEMD_MARKERS if row.message_id}
    assert ids - catalog_ids == set()


def test_the_started_id_of_the_backfill_window_is_systemds(catalog_ids: set[str]) -> None:
    assert STARTED_MESSAGE_ID in catalog_ids
    assert STARTED_MESSAGE_ID == "39f53479d3a045ac8e11786248231fbf"  # SD_MESSAGE_UNIT_STARTED


def test_the_test_journals_use_systemds_ids(catalog_ids: set[str]) -> None:
    written = {
        value
        for name, value in vars(journal_writer).items()
        if name.startswith("MESSAGE_ID_") and isinstance(value, str)
    }
    assert written and written - catalog_ids == set()
