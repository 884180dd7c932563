"""What the README and docs/ say that code or the README itself must keep true.

docs/metrics.md's table is the one rendered from the metric table in code; the README's Quick
start is two commands; no doc overstates host key checking; every relative link resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

from vllm_sentinel.serve.metrics import metrics_markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MARKDOWN = (README, *sorted(DOCS.rglob("*.md")))


def test_readme_metric_table_matches_code() -> None:
    """Docs = code: regenerate docs/metrics.md's table when a metric changes."""
    text = (DOCS / "metrics.md").read_text()
    start = text.index("<!-- metrics-table")
    start = text.index("\n", start) + 1
    end = text.index("<!-- /metrics-table -->")
    assert text[start:end].strip() == metrics_markdown_table().strip()


def test_quick_start_has_exactly_two_commands() -> None:
    """The Quick start is two commands: run the demo, run the tests."""
    text = README.read_text()
    start = text.index("## Quick start")
    section = text[start : text.index("\n## ", start)]
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

    script = ROOT / "scripts" / "build-markers-doc.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_host_key_claims_name_the_insecure_switch() -> None:
    """No doc says host keys are *always* verified without naming the switch that turns it off.

    ``insecure_accept_any_host_key`` exists (default false, loudly logged), so "always" alone
    would be wrong; the config examples of the README and docs/daemon.md must show the switch
    next to ``known_hosts``.
    """
    always = re.compile(r"host keys? (?:are |is )?always (?:verified|checked)", re.IGNORECASE)
    for doc in MARKDOWN:
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            if always.search(line):
                assert "insecure_accept_any_host_key" in line, f"{doc.name}:{number}: {line}"
    for doc in (README, DOCS / "daemon.md"):
        example = doc.read_text()
        example = example[example.index("[[hosts]]") :]
        assert "known_hosts" in example[: example.index("```")], doc.name
        assert "insecure_accept_any_host_key" in example[: example.index("```")], doc.name


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub writes it: lower case, punctuation dropped."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = _CODE_BLOCK.sub("", doc.read_text())
    return {_slug(match[1]) for match in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


_CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_relative_links_resolve() -> None:
    """Every relative link of the README and docs/ names a file that exists, and its anchor a
    heading of that file (docs/ pages link each other relative to docs/)."""
    broken = []
    for doc in MARKDOWN:
        text = _CODE_SPAN.sub("", _CODE_BLOCK.sub("", doc.read_text()))
        for match in _LINK.finditer(text):
            target = match["target"]
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
