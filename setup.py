"""Build hook: compile the core's hot path with mypyc where a C compiler is at hand.

The modules below are strictly typed pure Python; mypyc turns them into C extensions that run
the engine about 1.7× faster (docs/performance.md). Each extension is optional: without a
compiler the build falls back to the pure-Python modules, which behave identically (the test
suite runs against both). ``VLLM_SENTINEL_PURE=1`` skips compiling (development installs do,
so that edits to the .py files take effect).
"""

from __future__ import annotations

import os

from setuptools import setup

HOT_PATH = [
    "vllm_sentinel/record.py",
    "vllm_sentinel/phases.py",
    "vllm_sentinel/snapshot.py",
    "vllm_sentinel/vllm_line.py",
    "vllm_sentinel/markers.py",
    "vllm_sentinel/tracebacks.py",
    "vllm_sentinel/causes.py",
    "vllm_sentinel/failure_lines.py",
    "vllm_sentinel/line_buffer.py",
    "vllm_sentinel/paste.py",
    "vllm_sentinel/text_log.py",
    "vllm_sentinel/journal_json.py",
    "vllm_sentinel/line_clock.py",
    "vllm_sentinel/seen_cursors.py",
    "vllm_sentinel/incarnation.py",
    "vllm_sentinel/crash.py",
    "vllm_sentinel/incarnations.py",
    "vllm_sentinel/tracker.py",
]


def _extensions() -> list[object]:
    if os.environ.get("VLLM_SENTINEL_PURE") == "1":
        return []
    try:
        from mypyc.build import mypycify

        extensions = mypycify(HOT_PATH, opt_level="3")
    except (ImportError, SystemExit, Exception) as error:  # mypyc unavailable or refused
        print(f"vllm-sentinel: not compiling the core ({error!r}); installing pure Python")
        return []
    for extension in extensions:
        extension.optional = True  # no C compiler: install the pure-Python modules instead
    return list(extensions)


setup(ext_modules=_extensions())
