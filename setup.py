"""Build hook: compile the core's hot path with mypyc, and ship the runbook in the package.

The modules in ``HOT_PATH`` are strictly typed pure Python; mypyc turns them into C extensions
that run the engine about 1.7× faster (docs/performance.md). Each extension is optional: without
a C compiler the build falls back to the pure-Python modules, which behave identically (the test
suite runs against both). The extensions are compiled in parallel, one job per CPU
(``build_ext --parallel``, setuptools' own option; ``VLLM_SENTINEL_BUILD_JOBS`` overrides).

No compiled module ever lands in the source tree: an editable install (``pip install -e .``)
stays pure Python, so that edits to the ``.py`` files take effect, and ``build_ext --inplace``
is refused. ``VLLM_SENTINEL_PURE=1`` skips compiling for a regular install too.

``docs/runbook.md`` is copied into the built package as ``vllm_sentinel/serve/runbook.md`` (the
daemon serves it at ``/runbook``), so the file lives once in git; a checkout or an editable
install reads ``docs/runbook.md`` itself (``vllm_sentinel.serve.runbook``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RUNBOOK = ROOT / "docs" / "runbook.md"

HOT_PATH = [
    "vllm_sentinel/engine/decode/record.py",
    "vllm_sentinel/engine/catalog/phases.py",
    "vllm_sentinel/engine/snapshot.py",
    "vllm_sentinel/engine/decode/vllm_line.py",
    "vllm_sentinel/engine/catalog/markers.py",
    "vllm_sentinel/engine/tracebacks.py",
    "vllm_sentinel/engine/catalog/failures.py",
    "vllm_sentinel/engine/catalog/causes.py",
    "vllm_sentinel/engine/catalog/failure_lines.py",
    "vllm_sentinel/engine/decode/line_buffer.py",
    "vllm_sentinel/engine/decode/paste.py",
    "vllm_sentinel/engine/decode/text_log.py",
    "vllm_sentinel/engine/decode/journal_json.py",
    "vllm_sentinel/engine/line_clock.py",
    "vllm_sentinel/engine/seen_cursors.py",
    "vllm_sentinel/engine/incarnation.py",
    "vllm_sentinel/engine/crash.py",
    "vllm_sentinel/engine/routing.py",
    "vllm_sentinel/engine/tracker.py",
]

# setuptools' commands that build extensions; the others (egg_info, dist_info: metadata, asked
# for before the build) run this file without type-checking and generating C for nothing
_BUILDING = frozenset({"build", "build_ext", "bdist_wheel", "bdist", "install"})


def _extensions() -> list[Any]:
    if os.environ.get("VLLM_SENTINEL_PURE") == "1":
        return []
    if "editable_wheel" in sys.argv or not _BUILDING & set(sys.argv):
        return []  # an editable install stays pure Python: nothing compiled in the tree
    try:
        from mypyc.build import mypycify

        extensions = mypycify(HOT_PATH, opt_level="3")
    except (ImportError, SystemExit, Exception) as error:  # mypyc unavailable or refused
        print(f"vllm-sentinel: not compiling the core ({error!r}); installing pure Python")
        return []
    for extension in extensions:
        extension.optional = True  # no C compiler: install the pure-Python modules instead
    return list(extensions)


class BuildExt(build_ext):
    """``build_ext`` in parallel by default, and never into the source tree."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            jobs = os.environ.get("VLLM_SENTINEL_BUILD_JOBS", "")
            self.parallel = int(jobs) if jobs.isdigit() else (os.cpu_count() or 1)

    def run(self) -> None:
        if self.inplace or getattr(self, "editable_mode", False):
            print("vllm-sentinel: not compiling into the source tree (pure Python there)")
            return
        super().run()


class BuildPy(build_py):
    """``build_py`` plus ``docs/runbook.md`` as ``vllm_sentinel/serve/runbook.md``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # vllm_sentinel.serve.runbook reads docs/runbook.md of the checkout
        target = Path(self.build_lib) / "vllm_sentinel" / "serve" / "runbook.md"
        self.copy_file(str(RUNBOOK), str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return [*outputs, str(Path(self.build_lib) / "vllm_sentinel" / "serve" / "runbook.md")]


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
