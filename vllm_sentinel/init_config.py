"""``vllm-sentinel init-config``: a starting configuration for the machine it runs on (edge).

Each step looks at something real and is optional; a step that cannot run is named, with the
system's reason, in a comment of the output rather than failing the command:

* **the journal** — units ``journalctl -F _SYSTEMD_UNIT`` and ``-F UNIT`` list whose name
  matches ``vllm*``, and units of any name that logged one of vLLM's start-up banners (the
  ``process_started`` and ``engine_init`` rows of ``markers.MARKERS``: "vLLM API server
  version …", "Initializing a V1 LLM engine (v…) with config: …", every release 0.2 – 0.33) in
  the last ``BANNER_WINDOW_SECONDS`` (``journalctl --grep``);
* **systemd** — ``systemctl list-units 'vllm*' --all`` (needs systemd running as PID 1) and
  ``systemctl list-unit-files 'vllm*'`` (reads the unit files, works without it);
* **GPUs** — NVML (``pynvml``): ``gpu = "nvml"`` when the library loads and sees a GPU, else
  ``gpu = "none"`` with the reason;
* **remote hosts** (``--ssh [USER@]HOST[:PORT]``) — each host's key must already be in the
  ``known_hosts`` file the daemon will use (matched the way asyncssh matches it when the daemon
  connects: the name, its addresses, ``[host]:port`` entries, hashed entries); with ``--keyscan``
  the keys are fetched with ``ssh-keyscan`` and appended, and their fingerprints printed for the
  operator to compare. Remote hosts get ``gpu = "nvidia-smi"`` and the ``vllm*.service`` glob.

The result is commented TOML; ``render_config`` checks it with ``config.parse_config`` before
returning it, so what ``init-config`` prints is always what ``check-config`` accepts.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import json
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from vllm_sentinel.config import (
    DEFAULT_UNITS,
    default_config,
    parse_config,
    parse_listen_address,
    parse_shard,
    validate_unit_pattern,
)
from vllm_sentinel.engine.catalog.markers import MARKERS, Event
from vllm_sentinel.engine.unit_selection import selects
from vllm_sentinel.errors import SentinelError

__all__ = [
    "BANNER_EVENTS",
    "BANNER_WINDOW_SECONDS",
    "DEFAULT_KNOWN_HOSTS",
    "FoundUnit",
    "GpuFindings",
    "InitConfigError",
    "LocalFindings",
    "SshTarget",
    "banner_regex",
    "check_known_host",
    "discover_units",
    "keyscan",
    "parse_ssh_target",
    "probe_nvml",
    "render_config",
]

BANNER_WINDOW_SECONDS = 7 * 86_400
"""How far back ``journalctl --grep`` looks for vLLM's start-up banners (bounded: grep reads
every entry of the window)."""

BANNER_EVENTS = frozenset({Event.PROCESS_STARTED, Event.ENGINE_INIT})
"""Marker events whose lines only vLLM prints, once per start: what ``banner_regex`` joins."""

DEFAULT_KNOWN_HOSTS = "/etc/vllm-sentinel/known_hosts"
"""Where the service user's known_hosts lives (it has no home directory)."""

_COMMAND_TIMEOUT_SECONDS = 60.0
_UNIT_GLOB = "vllm*"
_SERVICE = ".service"
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")  # PCRE2 refuses a name used twice: plain groups
_HOST_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_TARGET = re.compile(
    r"(?:(?P<user>[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63})@)?"
    r"(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252}))"
    r"(?::(?P<port>\d{1,5}))?"
)

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[bytes]"]
"""Runs an argv (no shell) and returns the finished process; ``OSError`` when it cannot start."""


class InitConfigError(SentinelError):
    """A request ``init-config`` cannot fulfil (the CLI prints it as one line, exit 2)."""


@dataclass(frozen=True, slots=True)
class FoundUnit:
    """A vLLM unit found on this machine and where: ``journal``, ``vLLM banner``, ``systemd``."""

    name: str
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GpuFindings:
    """What NVML said: the GPUs' product names, or why it could not be used."""

    names: tuple[str, ...] = ()
    problem: str = ""


@dataclass(frozen=True, slots=True)
class LocalFindings:
    """What ``discover_units`` and ``probe_nvml`` found on this machine.

    ``notes`` names each step that could not run, with the reason (one sentence each).
    """

    units: tuple[FoundUnit, ...] = ()
    notes: tuple[str, ...] = ()
    gpus: GpuFindings = field(default_factory=GpuFindings)


@dataclass(frozen=True, slots=True)
class SshTarget:
    """A remote host given as ``[USER@]HOST[:PORT]`` (IPv6 in brackets: ``[fd00::7]:2222``)."""

    name: str
    address: str
    port: int = 22
    user: str | None = None


def parse_ssh_target(text: str) -> SshTarget:
    """Parse ``[USER@]HOST[:PORT]``; the host name (as written) becomes the ``host`` label.

    Raises:
        InitConfigError: not that form, a port outside 1-65535, or a name over 64 characters.
    """
    match = _TARGET.fullmatch(text)
    if match is None:
        raise InitConfigError(
            f"--ssh {text!r}: expected [USER@]HOST[:PORT], e.g. sentinel@gpu-7:22 or [fd00::7]:22"
        )
    address = match["v6"] or match["host"]
    if match["v6"]:
        try:
            ipaddress.IPv6Address(address.split("%", 1)[0])
        except ValueError:
            raise InitConfigError(f"--ssh {text!r}: {address!r} is not an IPv6 address") from None
    port = int(match["port"] or 22)
    if not 1 <= port <= 65535:
        raise InitConfigError(f"--ssh {text!r}: port {port} is not in 1-65535")
    if not _HOST_NAME.fullmatch(address):
        raise InitConfigError(f"--ssh {text!r}: the host name is longer than 64 characters")
    return SshTarget(name=address, address=address, port=port, user=match["user"])


# --- units -------------------------------------------------------------------------------------


def banner_regex() -> str:
    """One PCRE2 pattern for vLLM's start-up banners (``journalctl --grep``).

    Built from the ``BANNER_EVENTS`` rows of ``markers.MARKERS`` that stand alone in a message
    (the logo rows, which need the lines around them, are left out); the ``^`` anchors go,
    since a journal message may keep vLLM's own ``INFO 01-02 …`` header in front, and named
    groups become plain ones (PCRE2 refuses a name used twice).
    """
    rows = [
        _NAMED_GROUP.sub("(?:", marker.pattern.removeprefix("^"))
        for marker in MARKERS
        if marker.event in BANNER_EVENTS and not marker.needle
    ]
    return "|".join(f"(?:{row})" for row in rows)


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        list(argv), capture_output=True, timeout=_COMMAND_TIMEOUT_SECONDS, check=False
    )


def _first_line(data: bytes) -> str:
    for line in data.decode("utf-8", errors="replace").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _call(run: Runner, argv: Sequence[str], what: str, notes: list[str]) -> bytes | None:
    """Run ``argv``; on failure add a note saying why and return ``None``."""
    try:
        result = run(argv)
    except (OSError, subprocess.TimeoutExpired) as error:
        reason = getattr(error, "strerror", None) or str(error)
        notes.append(f"{what}: could not run {argv[0]} ({reason.lower()})")
        return None
    if result.returncode != 0:
        if not result.stdout.strip() and not result.stderr.strip():
            return b""  # systemctl list-unit-files: exit status 1 when no file matches
        reason = _first_line(result.stderr) or f"exit status {result.returncode}"
        notes.append(f"{what}: {argv[0]} failed ({reason})")
        return None
    hint = _first_line(result.stderr)
    if "insufficient permissions" in hint or "not seeing messages" in hint:
        notes.append(f"{what}: {hint}")
    return result.stdout


def _unit_names(lines: Iterable[str]) -> list[str]:
    names = []
    for raw in lines:
        name = raw.strip()
        if not name.endswith(_SERVICE) or "@." in name:  # templates run only as instances
            continue
        try:
            validate_unit_pattern(name)
        except ValueError:
            continue
        names.append(name)
    return names


def discover_units(
    *,
    journalctl_args: Sequence[str] = (),
    now: datetime,
    run: Runner = _run,
) -> tuple[tuple[FoundUnit, ...], tuple[str, ...]]:
    """Find this machine's vLLM services in its journal and in systemd (module docstring).

    Args:
        journalctl_args: options choosing the journal (``--directory=…``), as in the config.
        now: the current time; the banner search looks back ``BANNER_WINDOW_SECONDS`` from it.
        run: runs a command (``subprocess.run`` without a shell, 60 s timeout).

    Returns:
        The services found, sorted by name, each with where it was found; and a note for each
        step that could not run (no systemd, no permission to read the journal …).
    """
    notes: list[str] = []
    found: dict[str, list[str]] = {}

    def add(names: Iterable[str], source: str) -> None:
        for name in names:
            sources = found.setdefault(name, [])
            if source not in sources:
                sources.append(source)

    journalctl = ["journalctl", *journalctl_args, "--no-pager", "--quiet"]
    for journal_field in ("_SYSTEMD_UNIT", "UNIT"):
        output = _call(run, [*journalctl, "--field", journal_field], "journal", notes)
        if output is not None:
            lines = output.decode("utf-8", errors="replace").splitlines()
            add((n for n in _unit_names(lines) if selects((_UNIT_GLOB,), n)), "journal")
    since = int(now.timestamp()) - BANNER_WINDOW_SECONDS
    output = _call(
        run,
        [
            *journalctl,
            f"--since=@{since}",
            "--case-sensitive=true",
            f"--grep={banner_regex()}",
            "--output=json",
            "--output-fields=_SYSTEMD_UNIT",
        ],
        "journal (vLLM banner search)",
        notes,
    )
    if output is not None:
        banner_units: list[str] = []
        for line in output.splitlines():
            try:
                entry: Any = json.loads(line)
            except ValueError:
                continue
            unit = entry.get("_SYSTEMD_UNIT") if isinstance(entry, dict) else None
            if isinstance(unit, str):
                banner_units.append(unit)
        add(_unit_names(banner_units), "vLLM banner")
    systemctl = ["systemctl", "--no-pager", "--no-legend", "--plain", "--full"]
    output = _call(run, [*systemctl, "list-units", "--all", _UNIT_GLOB], "systemd", notes)
    if output is not None:
        lines = output.decode("utf-8", errors="replace").splitlines()
        add(_unit_names(line.split(maxsplit=1)[0] for line in lines if line.strip()), "systemd")
    output = _call(run, [*systemctl, "list-unit-files", _UNIT_GLOB], "systemd unit files", notes)
    if output is not None:
        lines = output.decode("utf-8", errors="replace").splitlines()
        add(_unit_names(line.split(maxsplit=1)[0] for line in lines if line.strip()), "systemd")
    return tuple(FoundUnit(name, tuple(found[name])) for name in sorted(found)), tuple(notes)


# --- GPUs --------------------------------------------------------------------------------------


def probe_nvml(nvml: Any = None) -> GpuFindings:
    """Load NVML and name the GPUs it sees; never raises.

    Args:
        nvml: the pynvml module, or a fake with the same functions (``import pynvml`` when
            ``None``).
    """
    try:
        library = nvml if nvml is not None else importlib.import_module("pynvml")
        library.nvmlInit()
    except Exception as error:  # pynvml raises NVMLError subclasses, or ImportError
        return GpuFindings(problem=f"NVML did not load ({error or type(error).__name__})")
    try:
        names: list[str] = []
        for index in range(library.nvmlDeviceGetCount()):
            name = library.nvmlDeviceGetName(library.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
    except Exception as error:
        return GpuFindings(problem=f"NVML loaded but could not list the GPUs ({error})")
    finally:
        with contextlib.suppress(Exception):  # shutting down: nothing left to do on failure
            library.nvmlShutdown()
    if not names:
        return GpuFindings(problem="NVML loaded but sees no GPU")
    return GpuFindings(names=tuple(names))


# --- SSH host keys -----------------------------------------------------------------------------


def _addresses(target: SshTarget) -> list[str]:
    """The target's IP addresses ('' when it cannot be resolved), as asyncssh matches them."""
    try:
        ipaddress.ip_address(target.address)
    except ValueError:
        pass
    else:
        return [target.address]
    try:
        infos = socket.getaddrinfo(target.address, target.port, type=socket.SOCK_STREAM)
    except OSError:
        return [""]
    return sorted({str(info[4][0]) for info in infos}) or [""]


def check_known_host(target: SshTarget, known_hosts: str) -> int:
    """Return how many host keys ``known_hosts`` holds for ``target``; raise when none.

    Matching is asyncssh's (what the daemon's connection checks): host name or address,
    ``[host]:port`` for another port, hashed names.

    Raises:
        InitConfigError: the file is missing or unreadable, or has no key for the host.
    """
    import asyncssh

    path = os.path.expanduser(known_hosts)
    try:
        entries = asyncssh.read_known_hosts(path)
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise InitConfigError(
            f"{target.name}: cannot read known_hosts {path}: {reason} "
            f"(add the host's key there, or pass --keyscan to fetch it)"
        ) from None
    except (ValueError, asyncssh.Error) as error:
        raise InitConfigError(f"{target.name}: {path} is not a known_hosts file: {error}") from None
    port = None if target.port == 22 else target.port
    keys: set[bytes] = set()
    for address in _addresses(target):
        trusted, _ca, revoked, *_ = entries.match(target.address, address, port)
        refused = {key.public_data for key in revoked}
        keys |= {key.public_data for key in trusted} - refused
    if not keys:
        where = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
        raise InitConfigError(
            f"{target.name}: no host key for {where} in {path}: add it after checking its "
            f"fingerprint (ssh-keyscan -p {target.port} {target.address} >> {path}), or pass "
            "--keyscan to fetch it"
        )
    return len(keys)


def keyscan(target: SshTarget, known_hosts: str, run: Runner = _run) -> list[str]:
    """Fetch the target's host keys with ``ssh-keyscan`` and append them to ``known_hosts``.

    Trust on first use, asked for explicitly: the caller prints the returned fingerprints
    (``SHA256:… ssh-ed25519``) so that the operator can compare them with the host's own.

    Raises:
        InitConfigError: ssh-keyscan cannot run or returns no key, or the file cannot be written.
    """
    import asyncssh

    argv = ["ssh-keyscan", "-T", "10", "-p", str(target.port), target.address]
    try:
        result = run(argv)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise InitConfigError(f"{target.name}: cannot run ssh-keyscan: {error}") from None
    lines = [
        line
        for line in result.stdout.decode("utf-8", errors="replace").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    if not lines:
        reason = _first_line(result.stderr) or "no answer"
        raise InitConfigError(f"{target.name}: ssh-keyscan found no host key ({reason})")
    fingerprints = []
    for line in lines:
        _names, key_type, key_data = line.split(maxsplit=2)
        key = asyncssh.import_public_key(f"{key_type} {key_data}")
        fingerprints.append(f"{key.get_fingerprint('sha256')} {key_type}")
    path = Path(os.path.expanduser(known_hosts))
    try:
        with path.open("a", encoding="utf-8") as stream:
            stream.write("".join(f"{line}\n" for line in lines))
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise InitConfigError(f"{target.name}: cannot write {path}: {reason}") from None
    return fingerprints


# --- the file ----------------------------------------------------------------------------------


def _toml(value: str | Sequence[str]) -> str:
    """A TOML basic string or array of them (JSON's string escapes are TOML's)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "[" + ", ".join(json.dumps(item, ensure_ascii=False) for item in value) + "]"


def _comment(text: str, width: int = 98) -> list[str]:
    lines: list[str] = []
    current = "#"
    for word in text.split():
        if len(current) + 1 + len(word) > width and current != "#":
            lines.append(current)
            current = "#"
        current += " " + word
    lines.append(current)
    return lines


def _local_units(units: Sequence[FoundUnit]) -> list[str]:
    """The glob first (units that appear later are followed too), then units it misses."""
    glob = DEFAULT_UNITS[0]
    return [glob, *(unit.name for unit in units if not fnmatchcase(unit.name, glob))]


def render_config(
    *,
    local: LocalFindings | None,
    ssh_targets: Sequence[SshTarget] = (),
    known_hosts: str = DEFAULT_KNOWN_HOSTS,
    client_keys: Sequence[str] = (),
    listen: str = "127.0.0.1:9842",
    shard: str = "1/1",
    journalctl_args: Sequence[str] = (),
    now: datetime,
    host_name: str | None = None,
) -> str:
    """Write the findings as a commented TOML configuration.

    Args:
        local: what was found on this machine, or ``None`` to leave it out (a central
            instance that watches remote hosts only).
        ssh_targets: remote hosts, their keys already checked (``check_known_host``).
        known_hosts, client_keys: the SSH files every remote host uses.
        listen: the exporter's ``host:port``.
        shard: ``"i/n"`` for one of several central instances (``config.shard_of``).
        journalctl_args: options choosing the local journal, as found and as written.
        now: the time written in the header.
        host_name: the local host's name (default: this machine's short host name).

    Raises:
        InitConfigError: the result would not be a valid config (a bad ``listen``, ``shard``,
            ``journalctl_args`` or duplicate host names), with ``check-config``'s message.
    """
    lines = [
        "# vllm-sentinel configuration, written by `vllm-sentinel init-config` on "
        f"{now.strftime('%Y-%m-%d %H:%M %Z').strip()}.",
        "# Check it with: vllm-sentinel check-config FILE. Every key, with its default, is in",
        "# config.example.toml; the topologies and their limits are in docs/deployment.md.",
        "",
    ]
    if shard != "1/1":
        lines += [
            *_comment(
                f"This instance watches shard {shard} of the hosts below (by a hash of their "
                "names); the other instances use the same file with their own shard."
            ),
            f"shard = {_toml(shard)}",
            "",
        ]
    lines += [
        "[exporter]",
        *_comment(
            "Prometheus scrapes /metrics here. Listening beyond loopback serves the metrics "
            "and /status to the network: add web_config_file (TLS and basic auth, see "
            "docs/security.md)."
        ),
        f"listen = {_toml(listen)}",
    ]
    if local is not None:
        name = host_name or default_config().hosts[0].name
        lines += ["", "[[hosts]]", "# This machine, read through its own journal (no SSH)."]
        lines += [f"name = {_toml(name)}", "local = true"]
        if journalctl_args:
            lines.append(f"journalctl_args = {_toml(list(journalctl_args))}")
        if local.units:
            lines.append("# vLLM services found (and where):")
            lines += [f"#   {unit.name} ({', '.join(unit.sources)})" for unit in local.units]
        else:
            lines += _comment("No vLLM service found in the journal or in systemd yet.")
        lines += _comment(
            f"{DEFAULT_UNITS[0]} also follows vllm* services that appear later; add the names "
            "of services that run vLLM under another name."
        )
        for note in local.notes:
            lines += _comment(f"Not checked: {note}.")
        lines.append(f"units = {_toml(_local_units(local.units))}")
        if local.gpus.names:
            names = sorted(set(local.gpus.names))
            lines += _comment(f"NVML sees {len(local.gpus.names)} GPUs: {', '.join(names)}.")
            lines.append('gpu = "nvml"')
        else:
            lines += _comment(
                f'{local.gpus.problem}: no GPU memory readings. Set gpu = "nvml" once the '
                "NVIDIA driver is loaded (stall detection then sees weights loading)."
            )
            lines.append('gpu = "none"')
    for target in ssh_targets:
        lines += ["", "[[hosts]]"]
        lines += _comment(
            f"Over SSH; the host key is checked against {known_hosts} (asyncssh, strict). The "
            "user needs group systemd-journal there, never root."
        )
        lines += [f"name = {_toml(target.name)}", f"address = {_toml(target.address)}"]
        if target.port != 22:
            lines.append(f"port = {target.port}")
        if target.user is not None:
            lines.append(f"user = {_toml(target.user)}")
        else:
            lines.append('# user = "sentinel"   # default: the daemon\'s own user name')
        lines.append(f"known_hosts = {_toml(known_hosts)}")
        if client_keys:
            lines.append(f"client_keys = {_toml(list(client_keys))}")
        else:
            lines.append('# client_keys = ["/etc/vllm-sentinel/id_ed25519"]   # the login key')
        lines += [f"units = {_toml(list(DEFAULT_UNITS))}", 'gpu = "nvidia-smi"']
    text = "\n".join(lines) + "\n"
    try:
        parse_listen_address(listen)
        parse_shard(shard)
    except ValueError as error:
        raise InitConfigError(str(error)) from None
    try:
        parse_config(text, source="the generated config")
    except SentinelError as error:
        raise InitConfigError(str(error)) from None
    return text
