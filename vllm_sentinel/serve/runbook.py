"""The runbook the daemon serves at ``/runbook``: ``docs/runbook.md`` as an HTML page (edge).

The Markdown lives once in git, in ``docs/runbook.md``. A built package carries a copy as
``vllm_sentinel/serve/runbook.md`` (``setup.py`` copies it at build time); a source checkout or an
editable install reads ``docs/runbook.md`` itself. Headings get the anchors GitHub gives them
(``## VllmCrashed`` → ``#vllmcrashed``, ``### cuda_oom`` → ``#cuda_oom``), which every alert's
``runbook_url`` and the dashboard's link point at. Rendering is Python-Markdown's (``toc``
for the anchors, ``tables``, ``fenced_code``).
"""

from __future__ import annotations

import html
import importlib.resources
from pathlib import Path

__all__ = ["RunbookMissingError", "installed_runbook", "read_runbook", "render_runbook"]

_PACKAGED = "runbook.md"
_CHECKOUT = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em}"
    "pre,code{font-family:ui-monospace,monospace;font-size:90%}"
    "pre{background:#f4f4f4;padding:.6em;overflow-x:auto}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
    "h2,h3{scroll-margin-top:1em}:target{background:#fff6d5}"
)


class RunbookMissingError(FileNotFoundError):
    """Neither the packaged copy nor a checkout's ``docs/runbook.md`` is there."""


def read_runbook() -> str:
    """Return the runbook's Markdown: the packaged copy, else the checkout's ``docs/runbook.md``.

    Raises:
        RunbookMissingError: neither file exists (a package built without ``setup.py``).
    """
    packaged = importlib.resources.files("vllm_sentinel.serve").joinpath(_PACKAGED)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    if _CHECKOUT.is_file():
        return _CHECKOUT.read_text(encoding="utf-8")
    raise RunbookMissingError(f"no {_PACKAGED} in the package and no {_CHECKOUT}")


def installed_runbook() -> str | None:
    """The path of the runbook's Markdown a user can open on this machine: the copy the package
    installed, else a checkout's ``docs/runbook.md``; ``None`` when neither is a file there (a
    package built without ``setup.py``, or one imported from a zip)."""
    packaged = importlib.resources.files("vllm_sentinel.serve").joinpath(_PACKAGED)
    if isinstance(packaged, Path) and packaged.is_file():
        return str(packaged)
    return str(_CHECKOUT) if _CHECKOUT.is_file() else None


def render_runbook(text: str) -> bytes:
    """Render runbook Markdown as a complete UTF-8 HTML page whose headings carry anchors."""
    import markdown  # only the daemon renders it: replay and watch only name the file

    body = markdown.markdown(text, extensions=["toc", "tables", "fenced_code"])
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title or 'vllm-sentinel runbook')}</title>"
        f"<style>{_STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
    return page.encode("utf-8")
