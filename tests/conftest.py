"""Project-wide fixtures and options.

``--update-golden`` rewrites the expected files of golden tests so that the git diff is the
review. Integration tests (``-m integration``) need real binaries; locally they skip with a
reason when one is missing, and under ``CI=true`` a missing binary fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from tests.support.packaging import tracked_tree, wheelhouse
from tests.support.tls import write_self_signed


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden expected files from the current output",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests first: those marked ``slow`` (the chaos schedules, the soak runs), then
    those that share a session fixture on one worker (``xdist_group``), then the rest.

    Under pytest-xdist (``scripts/test``: two workers, ``--dist loadgroup
    --no-loadscope-reorder``, so work is handed out in this order) a long test picked last
    keeps one worker busy while the other waits; started first, the short ones fill the other
    worker meanwhile (longest first). A stable sort: each part keeps the order pytest-randomly
    gave it, and every worker collects the same order.
    """

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if item.get_closest_marker("xdist_group") is not None else 2

    items.sort(key=rank)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def require_binary(path: str) -> str:
    """Return the binary's path, or skip (locally) / fail (CI) when it is missing."""
    found = shutil.which(path) or (
        path if os.path.isabs(path) and os.access(path, os.X_OK) else None
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is required in CI (see .ci/run)")
        pytest.skip(f"{path} not installed")
    return found


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (its own CA)."""
    return write_self_signed(tmp_path)


@pytest.fixture(autouse=True)
def _reset_structlog() -> None:
    """structlog keeps one global configuration: reset it around every test."""
    structlog.reset_defaults()


@dataclass(frozen=True)
class BuiltPackage:
    """A copy of the tracked tree, and a wheelhouse with its pure wheel and every dependency."""

    tree: Path
    wheelhouse: Path
    log: str

    @property
    def wheel(self) -> Path:
        (wheel,) = self.wheelhouse.glob("vllm_sentinel-*.whl")
        return wheel


@pytest.fixture(scope="session")
def built_package(tmp_path_factory: pytest.TempPathFactory) -> BuiltPackage:
    """The package built once per session with ``pip wheel -v`` (as a user's pip builds it)."""
    require_binary("git")
    base = tmp_path_factory.mktemp("package")
    tree = tracked_tree(base / "tree")
    wheels = base / "wheelhouse"
    try:
        log = wheelhouse(wheels, tree)
    except subprocess.CalledProcessError as error:
        output = (error.stdout or b"").decode(errors="replace")[-3000:]
        pytest.fail(f"pip wheel failed: {(error.stderr or b'').decode()[-3000:]}\n{output}")
    return BuiltPackage(tree, wheels, log)
