"""The ``vllm-sentinel`` command line (edge): builds the object graph, maps errors to exit codes.

Exit codes: 0 success; 1 the daemon failed at run time; 2 bad usage, unreadable input, an
invalid config or a stdout that cannot be written (one line on stderr saying which); 141 (no
message) stdout's reader went away (``| head``), the shell's status for a writer killed by
SIGPIPE. ``main`` handles stdout's errors once, for every command.

**Start-up cost is part of the interface.** A post-mortem ``replay`` in a shell loop, or
``--version`` in a script, pays the import of everything this module imports. So this module
imports only ``click`` and light parts of the standard library at the top; each command
imports what it needs inside its own function (the daemon's asyncssh, pynvml, pydantic,
prometheus_client, asyncio and structlog are loaded by ``run``, never by ``replay``,
``--version`` or ``--help``). ``tests/integration/test_cli_imports.py`` runs each command in a
child process and fails when one of those modules shows up in ``sys.modules``;
``python -m benchmarks --only cli`` measures every command against ``python -c pass``. A new
command follows the same pattern: heavy imports inside the command function.

Commands that hold nothing needing a tear-down (``replay``, ``check-config``) leave with
``os._exit`` after flushing stdout and stderr (``main``): freeing the engine's objects one by
one at interpreter exit costs time and does nothing for the user.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final, NoReturn

import click

from vllm_sentinel import __version__

if TYPE_CHECKING:
    from vllm_sentinel.watch import WatchTarget

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "INPUT_FORMATS",
    "PASSWORD_ENV",
    "WATCH_EXIT_STATUSES",
    "WATCH_PHASES",
    "cli",
    "fetch_status",
    "main",
    "watch_target",
]

INPUT_FORMATS = ("auto", "json", "text")
"""``replay --format`` choices: the values of ``replay.InputFormat``, spelled out here so that
``--help`` does not import the engine (a test keeps the two equal)."""


class _ExitPlan:
    """Handed to every command as ``ctx.obj`` by ``main``; a command that holds nothing needing
    a tear-down sets ``fast`` so that ``main`` leaves with ``os._exit`` after flushing."""

    __slots__ = ("fast",)

    def __init__(self) -> None:
        self.fast = False


def _allow_fast_exit() -> None:
    """Let ``main`` skip the interpreter's tear-down after this command (see the docstring)."""
    context = click.get_current_context(silent=True)
    if context is not None and isinstance(context.obj, _ExitPlan):
        context.obj.fast = True


STOP_GRACE_SECONDS = 5.0
"""How long ``_until_signal`` lets a stopped command clean up before it leaves anyway."""

FORCED_EXIT_STATUS = 130
"""The exit status when a stop could not finish its clean-up (128 + SIGINT, as a shell says)."""


async def _until_signal(
    main: Coroutine[object, object, None], *, grace_seconds: float = STOP_GRACE_SECONDS
) -> None:
    """Run ``main`` until it ends or SIGINT/SIGTERM arrives, then cancel it and let it clean up.

    The handlers are installed even where the shell started us with SIGINT ignored (``cmd &``
    in a script), so both signals always stop the command the same way. The first signal stops
    it cleanly; when the clean-up has not finished ``grace_seconds`` later, or a second signal
    comes, one line on stderr says so and the process leaves at once (``os._exit``) with
    ``FORCED_EXIT_STATUS``: a stop is never a wait for something that may not end (a task that
    missed its cancellation, a connection that stays open).
    """
    import asyncio
    import contextlib
    import signal

    loop = asyncio.get_running_loop()
    signals: asyncio.Queue[int] = asyncio.Queue()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, signals.put_nowait, signum)
    task = asyncio.ensure_future(main)
    waiter = asyncio.ensure_future(signals.get())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not task.done():
        task.cancel()
        again = asyncio.ensure_future(signals.get())
        await asyncio.wait(
            {task, again}, timeout=grace_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        again.cancel()
        if not task.done():
            why = (
                "a second signal"
                if again.done() and not again.cancelled()
                else (f"its clean-up took over {grace_seconds:g} s")
            )
            click.echo(f"vllm-sentinel: stopped at once ({why})", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(FORCED_EXIT_STATUS)
    with contextlib.suppress(asyncio.CancelledError):
        await task  # re-raises what ``main`` raised (a port in use: OSError)


def _fail(message: str, *, status: int = 2) -> NoReturn:
    """Exit with ``status`` after one line on stderr: ``vllm-sentinel: MESSAGE``."""
    click.echo(f"vllm-sentinel: {message}", err=True)
    sys.exit(status)


def _in_file(path: str | None, error: Exception) -> str:
    """An error about a config file, prefixed with the file's path unless it names it."""
    message = str(error)
    if path is None or message.startswith(f"{path}:"):
        return message
    return f"{path}: {message}"


def _bind_failure(where: str, error: OSError) -> NoReturn:
    """Exit 2 with one line: the address, the reason in words and, when it is taken, a way out."""
    import errno

    reason = _os_reason(error)
    if error.errno == errno.EADDRINUSE:
        reason += " (another vllm-sentinel or demo? choose another address with --listen HOST:PORT)"
    _fail(f"cannot serve on {where}: {reason}")


def _os_reason(error: OSError) -> str:
    """``No such file or directory`` → ``no such file or directory`` (the message without
    errno and path)."""
    return (error.strerror or str(error)).lower()


def _check_input_path(path: str) -> None:
    """Exit 2 with one line when ``path`` does not exist or is a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        _fail(f"cannot read {path}: {_os_reason(error)}")
    if stat.S_ISDIR(mode):
        _fail(f"cannot read {path}: is a directory")


CONFIG_ENV = "VLLM_SENTINEL_CONFIG"
"""The environment variable naming the config file ``run`` and ``status`` read when no option
says (before ``DEFAULT_CONFIG_PATH``)."""

DEFAULT_CONFIG_PATH = "/etc/vllm-sentinel/config.toml"
"""Where the README's install writes the config: ``run`` and ``status`` read it when it is there
and neither an option nor ``$VLLM_SENTINEL_CONFIG`` names another."""


def _check_config_readable(path: str, why: str = "") -> None:
    """Exit 2 with one line when the config file ``path`` cannot be opened: the words of every
    command (``run --config``, ``check-config``, ``status``)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        _fail(f"cannot read {path}: {_os_reason(error)}{why}")


def _installed_config(*, readable_only: bool = False) -> str | None:
    """The config file to read when no option names one: ``$VLLM_SENTINEL_CONFIG`` (which
    must be readable: exit 2 otherwise), else ``DEFAULT_CONFIG_PATH`` when it exists, else
    ``None``. ``readable_only`` (``status``): ``DEFAULT_CONFIG_PATH`` only when this user may
    read it (the install makes it 0640 root:vllm-sentinel; others get the default address)."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        _check_config_readable(named, f" (named by ${CONFIG_ENV})")
        return named
    if not os.path.exists(DEFAULT_CONFIG_PATH):
        return None
    if readable_only and not os.access(DEFAULT_CONFIG_PATH, os.R_OK):
        return None
    return DEFAULT_CONFIG_PATH


class _OneLineUsageError(click.UsageError):
    """A usage error shown as the CLI's other errors are: one line on stderr, exit status 2."""

    def show(self, file: Any = None) -> None:
        """``vllm-sentinel: replay: Invalid value for '--last': … (see 'vllm-sentinel replay
        --help')``: click's own is three lines (usage, a hint, the error)."""
        names: list[str] = []
        ctx = self.ctx
        while ctx is not None and ctx.parent is not None:  # the root's name is how it was run
            names.insert(0, ctx.info_name or "")
            ctx = ctx.parent
        where = " ".join(names)
        prefix = f"{where}: " if where else ""
        path = " ".join(["vllm-sentinel", *names])
        click.echo(
            f"vllm-sentinel: {prefix}{self.format_message().rstrip('.')} (see '{path} --help')",
            file=file,
            err=file is None,
        )


class _Commands(click.Group):
    """The command group; its own and its commands' usage errors are one line (exit 2)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise _one_line(error) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line(error) from None


# click (8.2+) reports a group run without a command with the whole help as the message
_NO_ARGS_IS_HELP: Final = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(error: click.UsageError) -> click.UsageError:
    if isinstance(error, _OneLineUsageError):
        return error
    if isinstance(error, _NO_ARGS_IS_HELP):
        return _OneLineUsageError("Missing command", error.ctx)
    return _OneLineUsageError(error.format_message(), error.ctx)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vllm-sentinel")
def cli() -> None:
    """Watch vLLM units: startup phases, stalls, crash root causes, as Prometheus metrics."""


@cli.command("replay")
@click.argument("files", nargs=-1, required=True)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(INPUT_FORMATS),
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
@click.option(
    "--last",
    "last",
    type=click.IntRange(min=2),
    default=8,
    show_default=True,
    help="Show each unit's last N incarnations whole; the earlier ones are summed up.",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Show every incarnation (a crash loop of thousands prints thousands).",
)
def replay_command(
    files: tuple[str, ...],
    input_format: str,
    unit: str | None,
    output: str,
    last: int,
    show_all: bool,
) -> None:
    """Replay recorded logs (FILE… or - for stdin) and print each unit's timeline and verdict.

    A FILE is anything that can be opened and read: a file, a named pipe, <(cmd), /dev/stdin;
    gzip, xz, zstd and bzip2 data is decompressed (told by its first bytes, not its name).
    Journal JSON keeps its units; each plain-text file is one unit (named after the unit
    systemd's lines in it name, else "vllm", or after the file when several are given; a text
    that names several units is read as one, with a warning). A missing path, a directory, an
    input that cannot be opened or read, corrupt compressed data or binary data (not a log) is
    one line on stderr and exit status 2, with no timeline. On a terminal, verdicts are wrapped
    to its width; --output json keeps every message whole. A unit with more incarnations than
    --last shows the last ones and one line on the earlier ones (how many, how each ended,
    when), with the unit's totals; --all shows every one.
    """
    from datetime import UTC, datetime

    from vllm_sentinel.engine.report import render_text, to_json
    from vllm_sentinel.engine.terminal_text import json_for_terminal, printable, printable_values
    from vllm_sentinel.replay import InputFormat, replay
    from vllm_sentinel.sources.replay_input import InputError, read_input

    _allow_fast_exit()
    for path in files:
        if path != "-":
            _check_input_path(path)
    now = datetime.now(UTC)
    try:
        result = replay(
            (read_input(path) for path in files),
            input_format=InputFormat(input_format),
            unit=unit,
            names=[os.path.basename(path) if path != "-" else "stdin" for path in files],
            reference_year=now.year,
            now=now,  # no time without a year after it
            keep=None if show_all else last,
            labels=["stdin" if path == "-" else path for path in files],
        )
    except InputError as error:
        _fail(str(error))
    if output == "json":
        import orjson

        document = to_json(result.units)
        document["skipped"] = dict(result.skipped)
        document["warnings"] = list(result.warnings)
        shown = printable_values(document)
        click.echo(json_for_terminal(orjson.dumps(shown, option=orjson.OPT_INDENT_2)))
    else:
        from vllm_sentinel.serve.runbook import installed_runbook

        text = render_text(result.units, width=_terminal_width(), runbook=installed_runbook())
        click.echo(printable(text), nl=False)
        if result.skipped:
            detail = ", ".join(f"{k}={v}" for k, v in sorted(result.skipped.items()))
            click.echo(printable(f"skipped input: {detail}"))
    for warning in result.warnings:
        click.echo(printable(f"vllm-sentinel: warning: {warning}"), err=True)


def _terminal_width() -> int | None:
    """Columns to wrap verdicts to on a terminal (its width, or ``$COLUMNS``); ``None`` when
    stdout is a pipe or a file, whatever the environment says (scripts and grep get one line)."""
    import shutil

    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _self_command() -> str:
    """How the user ran this program, for commands we suggest (``.venv/bin/vllm-sentinel``)."""
    import shutil
    from pathlib import Path

    program = sys.argv[0] if sys.argv else ""
    if Path(program).name == "__main__.py":
        return f"{Path(sys.executable).name} -m vllm_sentinel"
    found = shutil.which("vllm-sentinel")
    if found and program and Path(found).resolve() == Path(program).resolve():
        return "vllm-sentinel"
    return program or "vllm-sentinel"


_LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


def _setup_logging(log_format: str, log_level: str) -> None:
    from vllm_sentinel.errors import ConfigError
    from vllm_sentinel.log import configure_logging

    try:
        configure_logging(log_format, log_level)  # type: ignore[arg-type]
    except ConfigError as error:
        _fail(str(error))


@cli.command("run")
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help=f"TOML config (default: ${CONFIG_ENV}, else {DEFAULT_CONFIG_PATH} when it exists, "
    "else watch this host's vllm*.service units).",
)
@click.option(
    "--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True
)
@click.option("--log-level", default="info", show_default=True, type=_LOG_LEVELS)
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Serve here instead of the config's exporter.listen (also across reloads).",
)
def run_command(
    config_path: str | None, log_format: str, log_level: str, listen: str | None
) -> None:
    """Run the monitoring daemon: follow journals, poll GPUs, serve /metrics and /status.

    Exit status 0 after SIGTERM/SIGINT; 1 when the last cursors and counters could not be
    saved; 2 for an invalid config, a state directory that cannot be written or an address
    that cannot be bound (one line on stderr).
    """
    import asyncio

    import structlog

    from vllm_sentinel.config import default_config, load_config
    from vllm_sentinel.daemon import Daemon
    from vllm_sentinel.errors import ConfigError, StateDirectoryError

    if listen is not None:
        _check_listen_option(listen)
    if config_path is None:
        config_path = _installed_config()
    if config_path is not None:
        _check_config_readable(config_path)
    _setup_logging(log_format, log_level)
    try:
        config = load_config(config_path) if config_path else default_config()
    except ConfigError as error:
        _fail(_in_file(config_path, error))

    daemon = Daemon(config, config_path, listen=listen)
    for warning in daemon.config.warnings:  # with --listen in place
        structlog.get_logger("vllm_sentinel.cli").warning("config_warning", detail=warning)
    try:
        status = asyncio.run(daemon.run())
    except OSError as error:
        _bind_failure(listen or config.exporter.listen, error)
    except ConfigError as error:
        _fail(_in_file(config_path, error))
    except StateDirectoryError as error:
        _fail(str(error))
    sys.exit(status)


@cli.command("check-config")
@click.argument("path")
def check_config_command(path: str) -> None:
    """Validate a config file (every bad key reported at once, exit 2).

    A file that cannot be read (missing, a directory, no permission) is one line and exit 2;
    so is an invalid one, its message naming the file, and a state directory run would refuse
    (run's words). Warnings (a file the daemon reads later, a state directory this
    unprivileged user is denied: the service's user may be allowed) leave the exit status 0.
    """
    from vllm_sentinel.config import check_config
    from vllm_sentinel.errors import ConfigError, StateDirectoryError

    _allow_fast_exit()
    _check_config_readable(path)
    try:
        lines = check_config(path)
    except ConfigError as error:
        _fail(_in_file(path, error))
    except StateDirectoryError as error:
        _fail(str(error))  # run's words, as run says them
    for line in lines:
        click.echo(line)


@cli.command("init-config")
@click.option(
    "--ssh",
    "ssh_hosts",
    multiple=True,
    metavar="[USER@]HOST[:PORT]",
    help="Add a remote host read over SSH (repeat for more); its host key must be in "
    "--known-hosts.",
)
@click.option(
    "--known-hosts",
    default="/etc/vllm-sentinel/known_hosts",
    show_default=True,
    help="known_hosts file the daemon checks remote host keys against.",
)
@click.option(
    "--keyscan",
    is_flag=True,
    help="Fetch missing host keys with ssh-keyscan, append them to --known-hosts and print "
    "their fingerprints (trust on first use: compare them with the hosts' own).",
)
@click.option(
    "--client-key",
    "client_keys",
    multiple=True,
    metavar="PATH",
    help="Private key the daemon logs in to remote hosts with (repeatable).",
)
@click.option("--no-local", is_flag=True, help="Leave this machine out (a central instance).")
@click.option(
    "--journalctl-arg",
    "journalctl_args",
    multiple=True,
    metavar="ARG",
    help="Option choosing this machine's journal, e.g. --journalctl-arg=--directory=DIR.",
)
@click.option(
    "--listen", default="127.0.0.1:9842", show_default=True, help="Exporter address, HOST:PORT."
)
@click.option("--shard", default="1/1", show_default=True, help="This instance's shard, i/n.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write here (mode 0640) instead of stdout; an existing file is kept unless --force.",
)
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
def init_config_command(
    ssh_hosts: tuple[str, ...],
    known_hosts: str,
    keyscan: bool,
    client_keys: tuple[str, ...],
    no_local: bool,
    journalctl_args: tuple[str, ...],
    listen: str,
    shard: str,
    output: str | None,
    force: bool,
) -> None:
    """Write a starting config for this machine: its vLLM units, its GPUs, SSH hosts.

    Looks for vLLM services in the journal (names matching vllm*, and any unit that logged
    vLLM's start-up banner in the last 7 days) and in systemd (systemctl list-units and
    list-unit-files 'vllm*'), and loads NVML for the GPUs. A step that cannot run is named
    in a comment of the output. Each --ssh host's key must already be in --known-hosts, or
    --keyscan fetches it. The output passes check-config. Exit status 2 with one line on
    stderr when a host key is missing, an option is invalid or --output exists.
    """
    from datetime import UTC, datetime

    from vllm_sentinel import init_config

    try:
        targets = [init_config.parse_ssh_target(text) for text in ssh_hosts]
        if no_local and not targets:
            raise init_config.InitConfigError("--no-local needs at least one --ssh host")
        if output is not None and not force and os.path.lexists(output):
            raise init_config.InitConfigError(f"{output} exists (--force overwrites it)")
        for target in targets:
            try:
                init_config.check_known_host(target, known_hosts)
            except init_config.InitConfigError:
                if not keyscan:
                    raise
                for fingerprint in init_config.keyscan(target, known_hosts):
                    click.echo(f"{target.name}: added host key {fingerprint}", err=True)
                init_config.check_known_host(target, known_hosts)
        now = datetime.now(UTC)
        local = None
        if not no_local:
            units, notes = init_config.discover_units(journalctl_args=journalctl_args, now=now)
            local = init_config.LocalFindings(units, notes, init_config.probe_nvml())
        text = init_config.render_config(
            local=local,
            ssh_targets=targets,
            known_hosts=known_hosts,
            client_keys=client_keys,
            listen=listen,
            shard=shard,
            journalctl_args=journalctl_args,
            now=now,
        )
    except init_config.InitConfigError as error:
        _fail(f"init-config: {error}")
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        _write_private(output, text)
    except OSError as error:
        _fail(f"init-config: cannot write {output}: {_os_reason(error)}")
    click.echo(f"wrote {output}; check it with: vllm-sentinel check-config {output}", err=True)


def _write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0640 (a temporary file renamed over it)."""
    from pathlib import Path

    from vllm_sentinel.state.atomic_file import write_atomically

    write_atomically(Path(path), text.encode(), mode=0o640)


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
@click.option("--log-level", default="warning", show_default=True, type=_LOG_LEVELS)
def demo_command(listen: str, speed: float, duration: float | None, log_level: str) -> None:
    """Play bundled real-shaped incidents through the engine and serve their metrics.

    Ctrl-C (SIGINT) or SIGTERM stops it, at any moment, with exit status 0 (130 when its
    clean-up does not finish within 5 s, or on a second Ctrl-C).
    """
    import contextlib

    with contextlib.suppress(KeyboardInterrupt):  # while starting, before the handlers
        _demo(listen, speed, duration, log_level)


def _demo(listen: str, speed: float, duration: float | None, log_level: str) -> None:
    import asyncio

    from vllm_sentinel.demo import run_demo

    host, port = _check_listen_option(listen)
    _setup_logging("console", log_level)
    try:
        asyncio.run(
            _until_signal(
                run_demo(
                    host,
                    port,
                    speed=speed,
                    duration_seconds=duration,
                    announce=click.echo,
                    command=_self_command(),
                )
            )
        )
    except OSError as error:
        _bind_failure(listen, error)


def _check_listen_option(listen: str) -> tuple[str, int]:
    """Split ``--listen HOST:PORT``, or exit 2 with one line saying what is wrong."""
    from vllm_sentinel.config import parse_listen_address

    try:
        return parse_listen_address(listen)
    except ValueError as error:
        _fail(f"--listen: {error}")


_DEFAULT_STATUS_URL = "http://127.0.0.1:9842"


def _config_url(path: str) -> str:
    """The URL ``status`` asks for the daemon of config file ``path``: its ``[exporter]``
    listen address (loopback for an address that means every interface), ``https://`` when
    it serves TLS. Exit 2 with one line for a config ``run`` would refuse."""
    from vllm_sentinel.config import load_config
    from vllm_sentinel.errors import ConfigError

    try:
        exporter = load_config(path).exporter
    except ConfigError as error:
        _fail(_in_file(path, error))
    host, port = exporter.listen_host, exporter.listen_port
    if host in ("", "0.0.0.0"):  # noqa: S104 (read from the config, not bound here)
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    tls = exporter.has_tls
    if exporter.web_config_file:
        from vllm_sentinel.serve.web_config import load_web_config

        try:
            tls = load_web_config(exporter.web_config_file).tls is not None
        except ConfigError as error:
            _fail(_in_file(exporter.web_config_file, error))
    where = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{where}:{port}"


PASSWORD_ENV = "VLLM_SENTINEL_PASSWORD"  # noqa: S105  (a variable's name, not a password)
"""The environment variable ``status --user`` reads the basic-auth password from."""

_STATUS_TIMEOUT_SECONDS = 10.0


def _status_failed(url: str, reason: str) -> NoReturn:
    _fail(f"cannot read {url}/status: {reason}")


def _connection_reason(error: object, *, cacert: str | None) -> str:
    """One line for why a connection or TLS handshake failed."""
    import http.client
    import socket
    import ssl

    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or error.reason or str(error)
        hint = f"not signed by {cacert}" if cacert else "pass the server's CA with --cacert PATH"
        return f"TLS certificate verification failed: {detail} ({hint})"
    if isinstance(error, ssl.SSLError):
        return f"TLS handshake failed: {str(error.reason or error).lower()} (an https:// server?)"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (is the daemon running and listening there?)"
    if isinstance(error, TimeoutError):
        return f"no answer within {_STATUS_TIMEOUT_SECONDS:g} s"
    if isinstance(error, http.client.RemoteDisconnected | ConnectionResetError):
        return "the server closed the connection (an https:// server asked over http://?)"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host: {error.strerror}"
    if isinstance(error, OSError):
        return (error.strerror or str(error)).lower()
    return str(error)


def fetch_status(url: str, *, cacert: str | None = None, user: str | None = None) -> Any:
    """GET ``url``/status and return the parsed JSON document, or exit 2 with one line.

    Args:
        url: base URL of a running daemon, ``http://`` or ``https://``.
        cacert: a PEM file of CA certificates to verify the server's certificate with, instead
            of the system's trust store (there is no switch that skips verification).
        user: basic-auth user; the password is read from ``$VLLM_SENTINEL_PASSWORD``, never
            from the command line. The header is not forwarded on a redirect.

    Returns:
        The ``/status`` document.

    Exits (``SystemExit(2)``, one line on stderr) on: a URL that is not http(s); ``cacert``
    with an http:// URL or an unusable CA file; ``user`` without the password variable; 401
    (missing or wrong credentials) or another HTTP error; a TLS verification failure;
    connection refused, a timeout or another network error; an answer that is not JSON.
    """
    import base64
    import http.client
    import ssl
    import urllib.error
    import urllib.parse
    import urllib.request

    import orjson

    base = url.rstrip("/")
    scheme = urllib.parse.urlsplit(base).scheme.lower()
    if scheme not in ("http", "https"):
        _status_failed(base, "--url must start with http:// or https://")
    context: ssl.SSLContext | None = None
    if cacert is not None:
        if scheme != "https":
            _status_failed(base, "--cacert applies to https:// URLs only")
        try:
            context = ssl.create_default_context(cafile=cacert)
        except ssl.SSLError as error:
            reason = str(error.reason or error).lower()
            _status_failed(base, f"--cacert {cacert}: not a PEM file of CA certificates ({reason})")
        except OSError as error:
            _status_failed(base, f"--cacert {cacert}: {(error.strerror or str(error)).lower()}")
    endpoint = base + "/status"  # http or https (checked above): no file: or custom schemes
    request = urllib.request.Request(endpoint, headers={"Accept": "application/json"})  # noqa: S310
    if user is not None:
        password = os.environ.get(PASSWORD_ENV)
        if password is None:
            _status_failed(base, f"--user {user}: set the password in {PASSWORD_ENV}")
        if ":" in user:
            _status_failed(base, f"--user {user!r}: a user name cannot contain ':'")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {token}")
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=_STATUS_TIMEOUT_SECONDS) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 401:
            detail = (
                "wrong user or password"
                if user is not None
                else f"credentials needed: --user NAME, with the password in {PASSWORD_ENV}"
            )
            _status_failed(base, f"401 Unauthorized: {detail}")
        _status_failed(base, f"HTTP {error.code} {error.reason}")
    except urllib.error.URLError as error:
        _status_failed(base, _connection_reason(error.reason, cacert=cacert))
    except (OSError, http.client.HTTPException) as error:
        _status_failed(base, _connection_reason(error, cacert=cacert))
    except orjson.JSONDecodeError:
        _status_failed(base, "the answer is not a JSON document (is this vllm-sentinel?)")


@cli.command("status")
@click.option(
    "--url",
    default=None,
    help="Base URL of a running vllm-sentinel (http:// or https://). Default: the [exporter] "
    f"listen address of ${CONFIG_ENV}'s file, else of {DEFAULT_CONFIG_PATH} when it exists, "
    "else http://127.0.0.1:9842.",
)
@click.option(
    "--cacert",
    type=click.Path(dir_okay=False),
    default=None,
    help="Verify the server's TLS certificate against the CA certificates in this PEM file.",
)
@click.option(
    "--user",
    default=None,
    help=f"Basic-auth user; the password is read from ${PASSWORD_ENV}.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the raw /status document.")
def status_command(url: str | None, cacert: str | None, user: str | None, as_json: bool) -> None:
    """Show hosts and units of a running daemon (from its /status).

    Exit status 2 with one line on stderr when the status cannot be read (401, TLS
    verification, connection refused …).
    """
    import orjson

    from vllm_sentinel.engine.report import render_status
    from vllm_sentinel.engine.terminal_text import json_for_terminal, printable, printable_values

    if url is None:
        path = _installed_config(readable_only=True)
        url = _config_url(path) if path is not None else _DEFAULT_STATUS_URL
    document = fetch_status(url, cacert=cacert, user=user)
    if as_json:
        shown = printable_values(document)
        click.echo(json_for_terminal(orjson.dumps(shown, option=orjson.OPT_INDENT_2)).decode())
        return
    click.echo(printable(render_status(document, runbook=url.rstrip("/") + "/runbook")), nl=False)


def watch_target(
    host: str | None,
    *,
    directory: str | None = None,
    known_hosts: str = "~/.ssh/known_hosts",
    identities: tuple[str, ...] = (),
    state_directory: str = "/var/lib/vllm-sentinel",
) -> WatchTarget:
    """The ``watch`` options → where to read the journal and GPU memory.

    Without ``host``: this machine's ``journalctl``; GPU memory from this machine's NVML only
    when the journal is this machine's own (no ``directory``): a ``--directory`` holds another
    host's journal (journal-remote), whose GPUs this machine cannot see, and local GPU growth
    would count as that host's progress; that host is named by its journal (``run_watch``
    reads the ``_HOSTNAME`` of the units' records), the directory's name until then, never
    this machine's. With ``host``: ``journalctl`` and ``nvidia-smi`` over
    SSH. Exits 2 with one line (``_fail``) for a bad ``host``, ``identities`` without ``host``,
    or a known_hosts file or identity that cannot be read.
    """
    from vllm_sentinel.config import host_name_from, local_host_name
    from vllm_sentinel.watch import WatchTarget

    journalctl_args = (f"--directory={directory}",) if directory else ()
    history = os.path.join(state_directory, "history")
    if host is None:
        from vllm_sentinel.sources.transport import LocalTransport

        if identities:
            _fail("watch: --identity needs --host (it is the key to log in to that host with)")
        if directory:  # another machine's journal: its name, until its records give theirs
            name = host_name_from(os.path.basename(os.path.normpath(directory)))
            return WatchTarget(
                name,
                LocalTransport(name),
                journalctl_args,
                gpu=None,
                history_directory=history,
                host_from_journal=True,
            )
        name = local_host_name()
        return WatchTarget(
            name, LocalTransport(name), journalctl_args, gpu="nvml", history_directory=history
        )
    from vllm_sentinel.init_config import InitConfigError, parse_ssh_target
    from vllm_sentinel.sources.transport import SshSettings, SshTransport

    try:
        parsed = parse_ssh_target(host)
    except InitConfigError as error:
        _fail(f"watch: {str(error).replace('--ssh', '--host', 1)}")
    _check_ssh_file(
        known_hosts,
        "known_hosts",
        "(add the host's key there after checking its fingerprint, or name another file "
        "with --known-hosts)",
    )
    for identity in identities:
        _check_ssh_file(identity, "identity", "(name a private key with --identity)")
    settings = SshSettings(
        address=parsed.address,
        port=parsed.port,
        user=parsed.user,
        client_keys=identities,
        known_hosts=known_hosts,
    )
    return WatchTarget(
        parsed.name,
        SshTransport(parsed.name, settings),
        journalctl_args,
        gpu="nvidia-smi",
        history_directory=history,
    )


def _check_ssh_file(path: str, what: str, way_out: str) -> None:
    """Exit 2 with one line when the SSH file ``path`` (``~`` expanded) cannot be read."""
    full = os.path.expanduser(path)
    try:
        with open(full, "rb"):
            pass
    except OSError as error:
        _fail(f"watch: cannot read {what} {full}: {_os_reason(error)} {way_out}")


WATCH_PHASES = (
    "starting",
    "initializing",
    "loading_weights",
    "compiling",
    "profiling_kv_cache",
    "capturing_cuda_graphs",
    "starting_api_server",
)
"""``watch --until PHASE`` choices besides ``ready`` and ``settled``: the startup phases, spelled
out here so that ``--help`` does not import the engine (a test keeps them equal to
``watch.parse_until``'s)."""

WATCH_EXIT_STATUSES = (
    "Exit status: 0 every UNIT reached the --until state; 1 a followed incarnation crashed "
    "(its cause and fix hint on stderr, one line each); 3 one stalled; 4 the --timeout ran "
    "out; 2 bad usage, the journal cannot be read (connection, host key, journalctl), or "
    "stdout cannot be written; 130 stopped by Ctrl-C or SIGTERM; 141 stdout's reader went "
    "away (| head), as for any command killed by SIGPIPE."
)


@cli.command("watch", epilog=WATCH_EXIT_STATUSES)
@click.argument("units", nargs=-1, required=True, metavar="UNIT...")
@click.option(
    "--host",
    default=None,
    metavar="[USER@]HOST[:PORT]",
    help="Read the journal over SSH (host key checked against --known-hosts).",
)
@click.option(
    "--known-hosts",
    default="~/.ssh/known_hosts",
    show_default=True,
    help="known_hosts file the --host key must be in.",
)
@click.option(
    "--identity",
    "identities",
    multiple=True,
    metavar="PATH",
    help="Private key to log in to --host with (repeatable; default: the agent and ~/.ssh).",
)
@click.option(
    "--directory",
    default=None,
    metavar="DIR",
    help="Read the journal files in DIR (journalctl's --directory; on --host, there).",
)
@click.option(
    "--until",
    "until_text",
    default="ready",
    show_default=True,
    metavar="ready|settled|PHASE",
    help=(
        "Stop when every UNIT is ready, settled (ready or stopped cleanly), or reached PHASE "
        f"(or a later one): {', '.join(WATCH_PHASES)}."
    ),
)
@click.option(
    "--timeout",
    "timeout_text",
    default=None,
    metavar="DURATION",
    help="Give up after this long (90s, 5m, 1h30m; exit status 4). Default: never.",
)
@click.option("--json", "as_json", is_flag=True, help="NDJSON events on stdout, one a line.")
@click.option(
    "--state-directory",
    default="/var/lib/vllm-sentinel",
    show_default=True,
    help="The daemon's state directory: its startup history gives the ETA (read only).",
)
def watch_command(
    units: tuple[str, ...],
    host: str | None,
    known_hosts: str,
    identities: tuple[str, ...],
    directory: str | None,
    until_text: str,
    timeout_text: str | None,
    as_json: bool,
    state_directory: str,
) -> None:
    """Follow UNIT... from its current incarnation until it is ready, crashed or stalled.

    Reads the unit's journal (this machine's, the files in --directory, or --host's over
    SSH) from its last two starts, then as lines arrive; GPU memory from NVML here or
    nvidia-smi on --host. Shows which incarnation it follows, the phase and time in it,
    shards and progress, the ETA and its basis, GPU memory, stalled or slower than usual,
    and the crash cause and fix hint of the incarnation before. On a terminal: one block
    redrawn in place; piped: one line per event; --json: NDJSON events. Same engine and
    rules as the daemon (see docs/watch.md).
    """
    import asyncio

    from vllm_sentinel.config import validate_unit_pattern
    from vllm_sentinel.watch import (
        JsonOutput,
        LineOutput,
        LiveOutput,
        WatchJudge,
        WatchOutput,
        parse_duration,
        parse_until,
        run_watch,
    )

    names = []
    for unit in units:
        if not unit.strip():
            _fail("watch: an empty UNIT: name the unit to follow (vllm-kimi, vllm@a.service)")
        if any(char in unit for char in "*?["):
            _fail(f"watch: {unit!r}: name the units to follow (no globs)")
        name = unit if "." in unit.rsplit("@", 1)[-1] else f"{unit}.service"
        try:
            validate_unit_pattern(name)
        except ValueError as error:
            # the name as typed, and no word of globs (watch takes none)
            head = f"{name!r} is not a valid systemd unit name or glob"
            words = str(error).replace(head, f"{unit!r} is not a valid systemd unit name", 1)
            _fail("watch: " + words.replace(", with '*?[]' for globs", ""))
        if any(char in name for char in "*?["):
            _fail(f"watch: {unit!r}: name the units to follow (no globs)")
        names.append(name)
    try:
        until = parse_until(until_text)
        timeout = parse_duration(timeout_text) if timeout_text is not None else None
    except ValueError as error:
        _fail(f"watch: {error}")
    _setup_logging("console", "error")
    target = watch_target(
        host,
        directory=directory,
        known_hosts=known_hosts,
        identities=identities,
        state_directory=state_directory,
    )

    def output(judge: WatchJudge) -> WatchOutput:
        if as_json:
            return JsonOutput(sys.stdout)
        if sys.stdout.isatty():
            import shutil

            return LiveOutput(sys.stdout, judge, lambda: shutil.get_terminal_size().columns)
        return LineOutput(sys.stdout)

    result: list[int] = []

    async def follow() -> None:
        result.append(
            await run_watch(
                target,
                names,
                until,
                output,
                timeout_seconds=timeout,
                err=lambda line: click.echo(f"vllm-sentinel: {line}", err=True),
            )
        )

    try:
        asyncio.run(_until_signal(follow()))
    except KeyboardInterrupt:  # before the handlers were installed
        sys.exit(FORCED_EXIT_STATUS)
    sys.exit(result[0] if result else FORCED_EXIT_STATUS)  # stopped by a signal: 130


BROKEN_PIPE_STATUS = 141
"""The exit status when stdout's reader went away (``watch … | head -1``): 128 + SIGPIPE, what
the shell reports for ``yes | head -1``; nothing is written to stderr (it is not a crash)."""

OUTPUT_ERROR_STATUS = 2
"""The exit status when stdout cannot be written (``> /dev/full``): one line on stderr."""


def _output_failure(error: OSError) -> int:
    """The exit status for ``error``, raised writing stdout; says so on stderr (one line) unless
    stdout's reader went away. Points fd 1 at ``/dev/null`` so that nothing buffered fails again
    at interpreter exit."""
    import contextlib
    import errno

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if error.errno == errno.EPIPE:
        return BROKEN_PIPE_STATUS
    where = f"{error.filename}: " if error.filename else ""
    reason = error.strerror or str(error)
    with contextlib.suppress(OSError, ValueError):
        print(f"vllm-sentinel: cannot write the output: {where}{reason}", file=sys.stderr)
        sys.stderr.flush()
    return OUTPUT_ERROR_STATUS


def _run_cli(plan: _ExitPlan) -> int:
    """Run the command (click's non-standalone mode, its messages kept) and return its exit
    status; an ``OSError`` writing stdout is handled here, once, for every command."""
    import errno

    stdout = sys.stdout
    try:
        try:
            code = cli.main(obj=plan, standalone_mode=False)
        except click.ClickException as error:
            error.show()
            return error.exit_code
        except click.Abort:
            click.echo("Aborted!", err=True)
            return 1
        except SystemExit as done:
            if sys.stdout is not stdout:
                # click met EPIPE and swapped stdout for a wrapper that hides it (exit 1)
                sys.stdout = stdout
                return _output_failure(BrokenPipeError(errno.EPIPE, "Broken pipe"))
            code = done.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        sys.stdout.flush()
    except OSError as error:
        return _output_failure(error)
    return code if isinstance(code, int) else 0


def main() -> None:
    """Console-script entry point.

    Runs the command and flushes stdout. A closed stdout (``| head``) exits
    ``BROKEN_PIPE_STATUS`` quietly; another write error on stdout (``> /dev/full``) is one line
    on stderr and ``OUTPUT_ERROR_STATUS``, never a traceback. When the command allowed a fast
    exit (``_allow_fast_exit``), flushes stderr and leaves with ``os._exit`` and the command's
    status, skipping the interpreter's tear-down (freeing every object, module finalisers).
    Any other command exits as usual.
    """
    plan = _ExitPlan()
    code = _run_cli(plan)
    if plan.fast:
        import contextlib

        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
