"""``scripts/check-vllm-release`` on a small wheel made here: what it reports, its exit codes.

The wheel holds a few files under the paths vLLM uses, written with vLLM 0.33.0's own format
strings (the sleep lines of v1/executor/abstract.py, the watchdog's of utils/watch_dog.py) and
with strings a future release might change. The real releases' reports are in
docs/vllm-releases.md (the script downloads a large wheel: not run here).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-vllm-release"

ABSTRACT = """
import logging
logger = logging.getLogger(__name__)

class Executor:
    def sleep(self, level=1):
        logger.info("It took %.6f seconds to fall asleep.", 1.0)

    def wake_up(self, tags=None):
        logger.info("It took %.6f seconds to wake up tags %s.", 1.0, tags)
"""

WATCHDOG_CHANGED = """
import logging
logger = logging.getLogger(__name__)

def dump_stack(path, reason):
    # a future release rewords the dump line: the row no longer matches it
    logger.info("[Watchdog] wrote the stack of every thread to %s (%s)", path, reason)

def start(timeout, interval, dump_dir):
    logger.info("[Watchdog]Start with timeout=%s check_interval=%s dump_dir=%s", timeout, interval, dump_dir)
"""

CORE = """
import logging
logger = logging.getLogger(__name__)

def run_engine_core():
    logger.info("Entering low-power state before start")
    raise RuntimeError(f"Timed out waiting for engine core processes to start. Waited {600}s")
"""

DAEMON_CHANGED = """
import logging
logger = logging.getLogger(__name__)

def serve(role, rank, path, pid):
    logger.info("Weight cache %s daemon rank %d serving on %s (pid %d)", role, rank, path, pid)
"""


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    wheel = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, check=False
    )


def _script() -> ModuleType:
    """The script as a module (it has no .py suffix)."""
    loader = importlib.machinery.SourceFileLoader("check_vllm_release", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


def test_gone_changed_unexplained_and_classified_are_reported(tmp_path: Path) -> None:
    """The sleep rows are found; the dump row's words are gone; the daemon's serving line
    changed shape (its literal text is still there: the new string is named); a new lifecycle
    line no row covers is listed; the timeout raise is classified; exit status 1."""
    wheel = _wheel(
        tmp_path,
        {
            "vllm/v1/executor/abstract.py": ABSTRACT,
            "vllm/utils/watch_dog.py": WATCHDOG_CHANGED,
            "vllm/v1/engine/core.py": CORE,
            "vllm/model_executor/model_loader/weight_cache/daemon.py": DAEMON_CHANGED,
        },
    )
    result = _run("0.33.0", "--wheel", str(wheel))
    assert result.returncode == 1, result.stderr
    report = result.stdout
    assert report.startswith("## vLLM 0.33.0\n")
    assert "- **gone** marker `watchdog_dump` (vllm/utils/watch_dog.py, versions 0.33.0)" in report
    assert "- **gone** marker `fell_asleep`" not in report
    assert "- **gone** marker `watchdog_started`" not in report
    assert (
        "- **changed** marker `weight_cache_serving` "
        "(vllm/model_executor/model_loader/weight_cache/daemon.py, versions 0.30.0–0.33.0 (the "
        "role from 0.33.0)): its "
        "text `Weight cache` is now in `Weight cache %s daemon rank %d serving on %s (pid %d)` "
        "(vllm/model_executor/model_loader/weight_cache/daemon.py:6)"
    ) in report
    assert "| vllm/v1/engine/core.py:6 | log:info | `Entering low-power state before start` |" in (
        report
    )
    assert "raises the crash-cause table classifies: timeout 1" in report
    assert "**1 unexplained**" in report


def test_a_release_the_rows_know_is_clean(tmp_path: Path) -> None:
    """Against the sleep rows alone, the sleep file is clean: covered, nothing gone."""
    script = _script()
    strings = script.scan_source("vllm/v1/executor/abstract.py", ABSTRACT)
    rows = [row for row in script.marker_rows() if row.name in ("fell_asleep", "woke_up")]
    report = script.check("0.33.0", strings, rows)
    assert report.clean
    assert [(item.text, row.name) for item, row in report.covered] == [
        ("It took %.6f seconds to fall asleep.", "fell_asleep"),
        ("It took %.6f seconds to wake up tags %s.", "woke_up"),
    ]
    text = script.render(report)
    assert "0 gone, 0 changed" in text and "None unexplained." in text


def test_samples_fill_each_placeholder_by_its_type() -> None:
    """``%d`` gets integers, ``%.2f`` decimals, ``%s`` words, numbers and dicts alike."""
    script = _script()
    found = script.Found("log:info", "vllm/x.py", 1, "Loaded %d shards (%.2f GiB) from %s")
    texts = script.samples(found)
    assert "Loaded 12 shards (1.50 GiB) from /tmp/x.sock" in texts
    assert "Loaded 1 shards (12 GiB) from {'model': 'x'}" in texts


def test_a_row_of_an_older_release_is_not_gone(tmp_path: Path) -> None:
    """The watchdog rows name 0.33.0 only: against 0.30.0 their absence is no finding."""
    wheel = _wheel(tmp_path, {"vllm/v1/executor/abstract.py": ABSTRACT})
    result = _run("0.30.0", "--wheel", str(wheel))
    assert "watchdog" not in result.stdout.split("### Rows whose versions")[0]


def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """A version that is not one, or a wheel that is not there: one line on stderr, 2."""
    for argv in (["0.33.0; rm -rf /"], ["0.33.0", "--wheel", str(tmp_path / "none.whl")]):
        result = _run(*argv)
        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("check-vllm-release: ")
