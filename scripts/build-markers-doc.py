#!/usr/bin/env python3
"""Regenerate the tables of ``docs/markers.md`` from ``vllm_sentinel/engine/catalog/markers.py``.

``--check`` exits 1 when the document is out of date (the test suite runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from vllm_sentinel.engine.catalog.markers import MARKERS, SYSTEMD_MARKERS

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


def render(text: str) -> str:
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
