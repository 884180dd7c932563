"""The README's metric table is the one rendered from the metric table in code."""

from __future__ import annotations

import re
from pathlib import Path

from vllm_sentinel.serve.metrics import metrics_markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_metric_table_matches_code() -> None:
    """Docs = code: regenerate the README section when a metric changes."""
    text = README.read_text()
    start = text.index("<!-- metrics-table")
    start = text.index("\n", start) + 1
    end = text.index("<!-- /metrics-table -->")
    assert text[start:end].strip() == metrics_markdown_table().strip()


def test_quick_start_has_exactly_two_commands() -> None:
    """The Quick start is two commands: run the demo, run the tests."""
    text = README.read_text()
    section = text[text.index("## Quick start") : text.index("## Replaying a log")]
    blocks = section.split("```")[1::2]  # the fenced code blocks
    commands = [line for block in blocks for line in block.splitlines()[1:] if line.strip()]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/vllm-sentinel demo",
        "./scripts/test",
    ]


def test_markers_doc_matches_catalog() -> None:
    """docs/markers.md's tables are the catalog in code (scripts/build-markers-doc.py)."""
    import subprocess
    import sys

    script = README.parent / "scripts" / "build-markers-doc.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_host_key_claims_name_the_insecure_switch() -> None:
    """No doc says host keys are *always* verified without naming the switch that turns it off.

    ``insecure_accept_any_host_key`` exists (default false, loudly logged), so "always" alone
    would be wrong; the README's config example must show the switch next to ``known_hosts``.
    """
    always = re.compile(r"host keys? (?:are |is )?always (?:verified|checked)", re.IGNORECASE)
    for doc in (README, README.parent / "docs" / "security.md"):
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            if always.search(line):
                assert "insecure_accept_any_host_key" in line, f"{doc.name}:{number}: {line}"
    example = README.read_text()
    example = example[example.index("[[hosts]]") :]
    assert "insecure_accept_any_host_key" in example[: example.index("```")]
