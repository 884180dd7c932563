#!/usr/bin/env python3
"""Regenerate the tables of ``docs/markers.md`` from ``vllm_sentinel/engine/catalog/markers.py``
and the failure catalog's coverage (``vllm_sentinel/engine/catalog/failures.tsv``).

``--check`` exits 1 when the document is out of date (the test suite runs it).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from vllm_sentinel.engine.catalog.announcements import ANNOUNCEMENTS
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.catalog.failures import load_rows
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


COVERAGE_HEAD = "## Failure catalog coverage\n\n"
COVERAGE_INTRO = """\
`vllm_sentinel/engine/catalog/failures.tsv` holds one row per message template that vLLM and
the libraries under it can raise or log as an error (the template with `{}` for each value, the
exception class, `file:function`, library, releases, cause). It is built from the published
wheels by `scripts/build-failure-catalog.py` (read with `ast`, and `strings` for the native
libraries; nothing is copied but the message texts):

```
pip download vllm==0.33.0 --no-deps --only-binary=:all: -d /work/cache/vllm-wheels   # each release
pip download --no-deps -d /work/cache/libs torch==2.9.0 nvidia-cuda-runtime-cu12==12.8.90 \\
    nvidia-nccl-cu12==2.27.5 hip-python-fork==6.3.3.540.31.1 huggingface_hub==0.35.3 \\
    ray==2.49.2 flashinfer-python==0.6.8 triton==3.5.0 transformers==4.57.1
PYTHONPATH=. python scripts/build-failure-catalog.py   # then scripts/build-markers-doc.py
```

The cause of a row: a reviewed override (the script's `OVERRIDES`, each with its reason), else
the project's vocabulary (`causes.CAUSE_RULES`) over the template, else where it is raised
(`LOCATION_DEFAULTS`: a `ValueError` in `vllm/config/` is a `config_error`), else `unknown`.
A crash's cause is the catalog row of its root evidence (message, and the raising frame where
one text is raised in several places), else the vocabulary, else `unknown` with the line shown.
A bare line that only a vLLM `raise` prints (no logger prints it), seen during startup, is
evidence of that failure even without its exception class (a paste that kept only the message).
"""


def coverage_table() -> str:
    rows = load_rows(everything=True)
    libraries = Counter(row.library for row in rows)
    known = Counter(row.library for row in rows if row.cause != "unknown")
    sites = [row for row in rows if row.library == "vllm" and "0.33.0" in row.releases]
    per_cause = Counter(row.cause for row in sites)
    lines = ["| library | rows | rows with a cause |", "|---|---|---|"]
    for library, count in sorted(libraries.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"| {library} | {count} | {known[library]} |")
    with_cause = sum(count for cause, count in per_cause.items() if cause != "unknown")
    lines += [
        "",
        f"vLLM 0.33.0: {len(sites)} failure sites (raise, assert and error-log templates), "
        f"{with_cause} with a cause:",
        "",
        "| cause | failure sites of vLLM 0.33 |",
        "|---|---|",
    ]
    for cause in CrashCause:
        if per_cause[cause.value]:
            lines.append(f"| `{cause.value}` | {per_cause[cause.value]} |")
    return "\n".join(lines)


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
    text = re.sub(
        r"(## systemd and the kernel\n\n.*?\n\n)(\|.*?\n)(?=\n## |\Z)",
        lambda m: m.group(1) + systemd_table() + "\n",
        text,
        flags=re.S,
    )
    section = COVERAGE_HEAD + COVERAGE_INTRO + "\n" + coverage_table() + "\n"
    head, found, _ = text.partition(COVERAGE_HEAD)
    return head + section if found else text.rstrip("\n") + "\n\n" + section


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
