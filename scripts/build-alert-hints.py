#!/usr/bin/env python3
"""Write the crash alerts' `hint` annotation from the fix hints of vllm_sentinel/engine/hints.py.

The alert rules cannot call Python, and the hint text must not be a label (labels stay
bounded), so the `hint` annotation of VllmCrashed and VllmCrashLooping is a Go template that
picks the cause's hint by its `cause` label (`{{ if eq $labels.cause "…" }}`), with the
phase variants of a cause nested by the phase of the latest crash of that cause (read with a
query of `vllm_sentinel_unit_last_crash_info`: the phase is not an alert label, so that the
alert keeps its identity while it fires), and ends with a link to the cause's
runbook section. This script writes that template from `CAUSE_HINTS` into
deploy/prometheus/vllm-sentinel-rules.yml, after the `# hint: generated …` comment of each
alert. Edit the hints, run it, commit both: tests/rules/test_rules.py checks the file is what
this script writes, and runs promtool over every cause.

    python scripts/build-alert-hints.py            # rewrite the annotations
    python scripts/build-alert-hints.py --check    # exit 1 if the rules file is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_sentinel.engine.hints import CAUSE_HINTS, GENERIC_FIELDS, generic_text  # noqa: E402

RULES = ROOT / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
MARKER = "# hint: generated from vllm_sentinel/engine/hints.py by scripts/build-alert-hints.py"
WIDTH = 100
# The runbook's address, as every alert's runbook_url takes it: the `url` of the recording rule
# job:vllm_sentinel_runbook_url:info (the one place it is set), else the path in the sources.
RUNBOOK = (
    '{{ with query "job:vllm_sentinel_runbook_url:info" }}{{ . | sortByLabel "instance" '
    '| first | label "url" }}{{ else }}docs/runbook.md{{ end }}'
)
ACTION = re.compile(r"\{\{.*?\}\}")
NBSP = "\x00"
# A row's fields as an alert fills them: the unit from its label, the rest in general form.
FIELDS = {**GENERIC_FIELDS, "unit": "{{ $labels.unit }}"}

# alert → (expression of the cause, of the phase, template text before and after the chain)
ALERTS: dict[str, tuple[str, str, str, str]] = {
    "VllmCrashed": (
        "$labels.cause",
        "$phase",
        '{{- $phase := "" }}{{ with printf '
        '"vllm_sentinel_unit_last_crash_info{job=%q,host=%q,unit=%q,cause=%q}" '
        "$labels.job $labels.host $labels.unit $labels.cause | query }}{{ with first . }}"
        "{{ $phase = .Labels.phase }}{{ end }}{{ end }}",
        "",
    ),
    "VllmCrashLooping": (
        ".Labels.cause",
        ".Labels.phase",
        '{{- with printf "vllm_sentinel_unit_last_crash_info{job=%q,host=%q,unit=%q}" '
        "$labels.job $labels.host $labels.unit | query }}{{ with first . }}",
        "{{ end }}{{ end }}",
    ),
}


def _branches(cause: str, phase: str) -> list[str]:
    """One `if`/`else if` branch per cause, phase variants nested; `unknown` is the `else`."""
    causes: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for row in CAUSE_HINTS:
        if row.when:
            continue  # its evidence is in the crash message, which no alert label carries
        phases = tuple(sorted(item.value for item in row.phases))
        causes.setdefault(row.cause, []).append((phases, generic_text(row, FIELDS)))
    branches = []
    fallback = ""
    for name, rows in causes.items():
        default = next(text for phases, text in rows if not phases)
        variants = [(phases, text) for phases, text in rows if phases]
        body = default
        if variants:
            parts = []
            for index, (phases, text) in enumerate(variants):
                keyword = "if" if index == 0 else "else if"
                names = " ".join(f'"{item}"' for item in phases)
                parts.append(f"{{{{ {keyword} eq {phase} {names} }}}}{text}")
            body = "".join(parts) + f"{{{{ else }}}}{default}{{{{ end }}}}"
        if name == "unknown":
            fallback = body
            continue
        keyword = "if" if not branches else "else if"
        branches.append(f'{{{{- {keyword} eq {cause} "{name}" }}}}{body}')
    branches.append(f"{{{{- else }}}}{fallback}{{{{ end }}}} Runbook: {RUNBOOK}#{{{{ {cause} }}}}")
    return branches


def annotation(alert: str, indent: str) -> list[str]:
    """The `hint: >-` lines of one alert, folded at WIDTH (YAML joins them with spaces)."""
    cause, phase, before, after = ALERTS[alert]
    body_indent = indent + "  "
    lines = [f"{indent}hint: >-"]
    if before:
        lines.append(body_indent + before)
    for branch in _branches(cause, phase):
        # keep each {{ action }} on one line: its spaces are not break points
        atomic = ACTION.sub(lambda found: found.group(0).replace(" ", NBSP), branch)
        wrapped = textwrap.wrap(
            atomic,
            width=WIDTH,
            initial_indent=body_indent,
            subsequent_indent=body_indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines.extend(line.replace(NBSP, " ") for line in wrapped)
    if after:
        lines[-1] += after
    return lines


def build(text: str) -> str:
    """The rules file with every generated `hint` annotation rewritten."""
    lines = text.split("\n")
    out: list[str] = []
    alert = None
    index = 0
    seen = set()
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("- alert: "):
            alert = stripped.removeprefix("- alert: ")
        out.append(line)
        index += 1
        if stripped != MARKER:
            continue
        if alert not in ALERTS:
            raise SystemExit(f"{RULES}: hint marker in alert {alert}, which has no template")
        indent = line[: len(line) - len(line.lstrip())]
        if index < len(lines) and lines[index].strip().startswith("hint:"):
            index += 1  # drop the old annotation: its key line and its deeper lines
            while index < len(lines) and lines[index].startswith(indent + " "):
                index += 1
        out.extend(annotation(alert, indent))
        seen.add(alert)
    missing = sorted(set(ALERTS) - seen)
    if missing:
        raise SystemExit(f"{RULES}: no '{MARKER}' line in {', '.join(missing)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if the file differs"
    )
    args = parser.parse_args(argv)
    current = RULES.read_text(encoding="utf-8")
    wanted = build(current)
    if args.check:
        if wanted != current:
            print(f"{RULES} is out of date: run python scripts/build-alert-hints.py")
            return 1
        return 0
    RULES.write_text(wanted, encoding="utf-8")
    print(f"wrote {RULES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
