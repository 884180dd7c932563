"""The ``vllm-sentinel`` command line (edge): builds the object graph, maps errors to exit codes.

Exit codes: 0 success; 1 the daemon failed at run time; 2 bad usage, unreadable input or an
invalid config (one line on stderr saying which).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import urllib.request
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import click
import orjson
import structlog

from vllm_sentinel import __version__
from vllm_sentinel.config import check_config, default_config, load_config
from vllm_sentinel.errors import ConfigError
from vllm_sentinel.log import configure_logging
from vllm_sentinel.replay import InputFormat, replay
from vllm_sentinel.report import render_status, render_text, to_json

__all__ = ["main"]

_CHUNK = 1 << 20


async def _until_signal(main: Coroutine[object, object, None]) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives, then cancel it and let it clean up.

    The handlers are installed even where the shell started us with SIGINT ignored (``cmd &``
    in a script), so both signals always stop the command the same way.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    task = asyncio.ensure_future(main)
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task  # re-raises what ``main`` raised (a port in use: OSError)


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
@click.option(
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="A timeline with verdicts, or one JSON document.",
)
def replay_command(
    files: tuple[str, ...], input_format: str, unit: str | None, output: str
) -> None:
    """Replay recorded logs (FILE… or - for stdin) and print each unit's timeline and verdict.

    Journal JSON keeps its units; each plain-text file is one unit (``vllm``, or the file's
    name when several are given).
    """
    for path in files:
        if path == "-":
            continue
        if Path(path).is_dir():
            click.echo(f"vllm-sentinel: cannot read {path}: is a directory", err=True)
            sys.exit(2)
        if not Path(path).is_file():
            click.echo(f"vllm-sentinel: cannot read {path}: no such file", err=True)
            sys.exit(2)
    try:
        result = replay(
            (_file_chunks(path) for path in files),
            input_format=InputFormat(input_format),
            unit=unit,
            names=[Path(path).name if path != "-" else "stdin" for path in files],
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


def _setup_logging(log_format: str, log_level: str) -> None:
    try:
        configure_logging(log_format, log_level)  # type: ignore[arg-type]
    except ConfigError as error:
        click.echo(f"vllm-sentinel: {error}", err=True)
        sys.exit(2)


@cli.command("run")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML config (default: watch this host's vllm*.service units).",
)
@click.option(
    "--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
def run_command(config_path: str | None, log_format: str, log_level: str) -> None:
    """Run the monitoring daemon: follow journals, poll GPUs, serve /metrics and /status."""
    _setup_logging(log_format, log_level)
    try:
        config = load_config(config_path) if config_path else default_config()
    except ConfigError as error:
        click.echo(f"vllm-sentinel: invalid config: {error}", err=True)
        sys.exit(2)
    for warning in config.warnings:
        structlog.get_logger("vllm_sentinel.cli").warning("config_warning", detail=warning)
    from vllm_sentinel.daemon import Daemon

    try:
        status = asyncio.run(Daemon(config, config_path).run())
    except OSError as error:
        click.echo(f"vllm-sentinel: cannot serve on {config.exporter.listen}: {error}", err=True)
        sys.exit(1)
    except ConfigError as error:
        click.echo(f"vllm-sentinel: {error}", err=True)
        sys.exit(2)
    sys.exit(status)


@cli.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
def check_config_command(path: str) -> None:
    """Validate a config file (every bad key reported at once, exit 2)."""
    try:
        for line in check_config(path):
            click.echo(line)
    except ConfigError as error:
        click.echo(f"vllm-sentinel: {error}", err=True)
        sys.exit(2)


@cli.command("demo")
@click.option("--listen", default="127.0.0.1:9842", show_default=True, help="host:port to serve.")
@click.option(
    "--speed",
    type=click.FloatRange(min=0.1, max=100.0),
    default=1.0,
    show_default=True,
    help="Extra speed-up on top of each incident's own.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Stop after this many seconds (default: run until Ctrl-C).",
)
def demo_command(listen: str, speed: float, duration: float | None) -> None:
    """Play bundled real-shaped incidents through the engine and serve their metrics."""
    from vllm_sentinel.config import parse_listen_address
    from vllm_sentinel.demo import run_demo

    try:
        host, port = parse_listen_address(listen)
    except ValueError as error:
        click.echo(f"vllm-sentinel: --listen: {error}", err=True)
        sys.exit(2)
    _setup_logging("console", "warning")
    try:
        asyncio.run(
            _until_signal(
                run_demo(host, port, speed=speed, duration_seconds=duration, announce=click.echo)
            )
        )
    except KeyboardInterrupt:  # before the handlers were in place
        pass
    except OSError as error:
        click.echo(f"vllm-sentinel: cannot serve on {listen}: {error}", err=True)
        sys.exit(1)


@cli.command("status")
@click.option(
    "--url",
    default="http://127.0.0.1:9842",
    show_default=True,
    help="Base URL of a running vllm-sentinel.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the raw /status document.")
def status_command(url: str, as_json: bool) -> None:
    """Show hosts and units of a running daemon (from its /status)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/status", timeout=10) as response:  # noqa: S310
            document = orjson.loads(response.read())
    except (OSError, ValueError) as error:
        click.echo(f"vllm-sentinel: cannot read {url}/status: {error}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(render_status(document), nl=False)


def main() -> None:
    """Console-script entry point."""
    cli()
