"""The installed vLLM's version read from a traceback's paths when no version line was seen.

A log excerpt often starts after vLLM's version line (``vLLM API server version X``), but a
traceback names the installed package in its frames' paths: an egg (``…/vllm-0.6.3.dev588+
g1033c3eb.gaudi000-py3.10.egg/vllm/engine/…``), a ``.dist-info`` directory, or the console
script's ``load_entry_point('vllm==0.7.4…', 'console_scripts', 'vllm')``. A version line, when
there is one, wins.
"""

from __future__ import annotations

import pytest

from vllm_sentinel.replay import replay

HEADER = "INFO 06-14 10:00:00 [api_server.py:1] args: Namespace(model='m')\n"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/bin/vllm", line 33, in <module>\n'
    "    sys.exit(load_entry_point({entry}, 'console_scripts', 'vllm')())\n"
    '  File "{path}/vllm/engine/llm_engine.py", line 300, in __init__\n'
    "    self.model_executor = executor_class(vllm_config=vllm_config)\n"
    "RuntimeError: Engine core initialization failed.\n"
)


def _version(text: str) -> str | None:
    (unit,) = replay([[text.encode()]], reference_year=2026).units
    return unit.incarnations[-1].vllm_version


@pytest.mark.parametrize(
    ("entry", "path", "expected"),
    [
        ("'vllm==0.7.4.dev119+gca377cf1.cpu'", "/opt/venv/lib/python3.10/site-packages",
         "0.7.4.dev119+gca377cf1.cpu"),
        ("'x==1'", "/usr/lib/python3.10/site-packages/vllm-0.6.3.dev588+g1033c3eb.gaudi000"
         "-py3.10.egg", "0.6.3.dev588+g1033c3eb.gaudi000"),
        ("'x==1'", "/usr/lib/python3.10/site-packages/vllm-0.5.1-py3.10-linux-x86_64.egg",
         "0.5.1"),
    ],
    ids=["entry-point", "egg", "egg-platform"],
)  # fmt: skip
def test_a_traceback_names_the_installed_version(entry: str, path: str, expected: str) -> None:
    assert _version(HEADER + TRACEBACK.format(entry=entry, path=path)) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/usr/lib/python3.10/site-packages/vllm_flash_attn-2.6.2-py3.10.egg",
        "/usr/lib/python3.10/site-packages/vllm-ascend-0.7.3-py3.10.egg",
        "/home/u/vllm-0.6.3/src",  # a source checkout named after a version: not an install
    ],
)
def test_other_packages_and_checkouts_say_nothing(path: str) -> None:
    assert _version(HEADER + TRACEBACK.format(entry="'x==1'", path=path)) is None


def test_a_version_line_wins() -> None:
    text = (
        "INFO 06-14 10:00:00 [api_server.py:1] vLLM API server version 0.7.3\n"
        + TRACEBACK.format(entry="'vllm==0.7.4'", path="/x")
    )
    assert _version(text) == "0.7.3"
