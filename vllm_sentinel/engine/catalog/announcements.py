"""Log lines that only announce that something failed: never the failure itself (core: pure).

vLLM logs ``logger.exception("EngineCore failed to start.")`` and the traceback after it: the
line says *that* the engine failed, the traceback's exception says *why*. Such a line is a
wrapper wherever it appears: it is never read as a traceback's exception line (without vLLM's
process prefixes, 0.8–0.9, another process's open traceback shares its stream), never stands
in for a cut-off exception, and never names a cause. The failure it points at is elsewhere:
the traceback that follows, or a line before it.

Each row is one format string of vLLM's (its source file and the releases read); a row is
written for the message's fixed words, so any formatted value matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["ANNOUNCEMENTS", "Announcement", "is_announcement"]


@dataclass(frozen=True, slots=True)
class Announcement:
    """One line that announces a failure logged elsewhere.

    Attributes:
        pattern: regex matched at the start of the line body (after vLLM's header).
        source: the vLLM file that logs it.
        versions: the releases whose source holds it (read in the wheels).
    """

    pattern: str
    source: str
    versions: str


ANNOUNCEMENTS: tuple[Announcement, ...] = (
    Announcement(r"EngineCore failed to start\.$", "vllm/v1/engine/core.py", "0.8.0–0.33.0"),
    Announcement(
        r"EngineCore encountered a fatal error\.$", "vllm/v1/engine/core.py", "0.8.0–0.33.0"
    ),
    Announcement(
        # 0.7.x logged the traceback in the same record: "EngineCore hit an exception:
        # Traceback (most recent call last):" (vllm-project/vllm#14574)
        r"EngineCore hit an exception\b",
        "vllm/v1/engine/core.py",
        "0.7.x",
    ),
    Announcement(r"Invocation of \S+ method failed$", "vllm/v1/engine/core.py", "0.8.0–0.33.0"),
    Announcement(
        r"WorkerProc (?:failed to start|failed|hit an exception)\.$",
        "vllm/v1/executor/multiproc_executor.py",
        "0.8.0–0.33.0",
    ),
    Announcement(
        r"AsyncLLM output_handler failed\.$", "vllm/v1/engine/async_llm.py", "0.8.0–0.33.0"
    ),
    Announcement(
        r"Engine background task failed$", "vllm/engine/async_llm_engine.py", "0.6.6–0.8.5 (V0)"
    ),
    Announcement(r"Worker failed$", "vllm/executor/multiproc_worker_utils.py", "0.6.6–0.8.5 (V0)"),
    Announcement(
        r"Error executing method \S+\. This might cause deadlock in distributed execution\.$",
        "vllm/worker/worker_base.py (V0), vllm/v1/worker/worker_base.py, v1/executor/ray_utils.py",
        "0.4–0.30.0",
    ),
)
"""Lines that say a failure happened and point at its traceback (see the module docstring)."""

_ANNOUNCEMENT: Final = re.compile("|".join(f"(?:{row.pattern})" for row in ANNOUNCEMENTS))


def is_announcement(body: str) -> bool:
    """Say whether a line body (after vLLM's header) only announces a failure."""
    return _ANNOUNCEMENT.match(body) is not None
