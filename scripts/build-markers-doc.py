#!/usr/bin/env python3
"""Regenerate the tables of ``docs/markers.md`` from ``vllm_sentinel/engine/catalog/markers.py``.

``--check`` exits 1 when the document is out of date (the test suite runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from vllm_sentinel.engine.catalog.announcements import ANNOUNCEMENTS
from vllm_sentinel.engine.catalog.frames import FRAME_PHASES
from vllm_sentinel.engine.catalog.markers import MARKERS, PHASE_ENDS, SYSTEMD_MARKERS

DOC = Path(__file__).resolve().parent.parent / "docs" / "markers.md"


def vllm_table() -> str:
    rows = [
        "| event | phase | pattern (message part) | vLLM versions | source |",
        "|---|---|---|---|---|",
    ]
    for marker in MARKERS:
        pattern = marker.pattern.replace("|", "\\|")
        phase = marker.phase.value if marker.phase else "—"
        rows.append(
            f"| `{marker.event.value}` | {phase} | `{pattern}` | {marker.versions} | "
            f"{marker.source} |"
        )
    return "\n".join(rows)


def systemd_table() -> str:
    rows = ["| event | MESSAGE_ID | pattern | source |", "|---|---|---|---|"]
    for marker in SYSTEMD_MARKERS:
        pattern = marker.pattern.replace("|", "\\|")
        rows.append(
            f"| `{marker.event.value}` | {marker.message_id or '—'} | `{pattern}` | "
            f"{marker.source} |"
        )
    return "\n".join(rows)


def phase_ends_table() -> str:
    rows = ["| event | ends phase | vLLM versions | source |", "|---|---|---|---|"]
    for row in PHASE_ENDS:
        rows.append(f"| `{row.event.value}` | {row.phase.value} | {row.versions} | {row.source} |")
    return "\n".join(rows)


def frames_table() -> str:
    rows = ["| phase | frame (regex) | vLLM versions | source |", "|---|---|---|---|"]
    for row in FRAME_PHASES:
        pattern = row.pattern.replace("|", "\\|")
        rows.append(f"| {row.phase.value} | `{pattern}` | {row.versions} | {row.source} |")
    return "\n".join(rows)


def announcements_table() -> str:
    rows = ["| line (regex, from the body's start) | vLLM versions | source |", "|---|---|---|"]
    for row in ANNOUNCEMENTS:
        pattern = row.pattern.replace("|", "\\|")
        rows.append(f"| `{pattern}` | {row.versions} | {row.source} |")
    return "\n".join(rows)


def _section_table(text: str, title: str, table: str) -> str:
    """Replace the first table of section ``title`` (after its prose) with ``table``."""
    return re.sub(
        rf"(## {re.escape(title)}\n\n(?:[^|\n].*\n|\n)*?)((?:\|.*\n)+)",
        lambda m: m.group(1) + table + "\n",
        text,
        count=1,
    )


def render(text: str) -> str:
    text = _section_table(text, "Where phases end", phase_ends_table())
    text = _section_table(text, "The phase a traceback was raised in", frames_table())
    text = _section_table(text, "Lines that announce a failure", announcements_table())
    text = re.sub(
        r"(## vLLM markers\n\n)(\|.*?\n)(?=\n## )",
        lambda m: m.group(1) + vllm_table() + "\n",
        text,
        flags=re.S,
    )
    return re.sub(
        r"(## systemd and the kernel\n\n.*?\n\n)(\|.*\n?)\Z",
        lambda m: m.group(1) + systemd_table() + "\n",
        text,
        flags=re.S,
    )


def main() -> int:
    current = DOC.read_text(encoding="utf-8")
    updated = render(current)
    if "--check" in sys.argv:
        if updated != current:
            print(f"{DOC} is out of date: run scripts/build-markers-doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
