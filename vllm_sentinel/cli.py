"""The ``vllm-sentinel`` command line (edge): builds the object graph, maps errors to exit codes.

Exit codes: 0 success; 1 the daemon failed at run time; 2 bad usage, unreadable input or an
invalid config (one line on stderr saying which).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import click
import orjson

from vllm_sentinel import __version__
from vllm_sentinel.replay import InputFormat, replay
from vllm_sentinel.report import render_text, to_json

__all__ = ["main"]

_CHUNK = 1 << 20


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            return
        yield chunk


def _file_chunks(path: str) -> Iterator[bytes]:
    if path == "-":
        yield from _chunks(sys.stdin.buffer)
        return
    with open(path, "rb") as stream:
        yield from _chunks(stream)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-sentinel")
def cli() -> None:
    """Watch vLLM units: startup phases, stalls, crash root causes, as Prometheus metrics."""


@cli.command("replay")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--format",
    "input_format",
    type=click.Choice([f.value for f in InputFormat]),
    default="auto",
    show_default=True,
    help="Input format (journal JSON or text).",
)
@click.option(
    "--unit",
    default=None,
    help="JSON: keep units matching this name/glob. Text: the unit name to report.",
)
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def replay_command(
    files: tuple[str, ...], input_format: str, unit: str | None, output: str
) -> None:
    """Replay recorded logs (FILE… or - for stdin) and print each unit's timeline and verdict."""
    for path in files:
        if path != "-" and not Path(path).is_file():
            click.echo(f"vllm-sentinel: cannot read {path}: no such file", err=True)
            sys.exit(2)
    try:
        result = replay(
            (_file_chunks(path) for path in files),
            input_format=InputFormat(input_format),
            unit=unit,
            reference_year=datetime.now(UTC).year,
        )
    except OSError as error:
        click.echo(f"vllm-sentinel: cannot read input: {error.strerror or error}", err=True)
        sys.exit(2)
    if output == "json":
        document = to_json(result.units)
        document["skipped"] = dict(result.skipped)
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_text(result.units), nl=False)
        if result.skipped:
            detail = ", ".join(f"{k}={v}" for k, v in sorted(result.skipped.items()))
            click.echo(f"skipped input: {detail}")


def main() -> None:
    """Console-script entry point."""
    cli()
