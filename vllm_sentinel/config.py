"""The configuration file: TOML → a frozen, validated ``Config`` (setup: no asyncio, no network).

This module reads one file (``load_config``) or a string (``parse_config``) and checks every key;
it starts no tasks and opens no connections. Everything else gets the frozen ``Config``. It
imports pydantic and the core's small tables, nothing of the daemon's edges (``check-config``
must start fast: ``ssh_settings`` imports ``transport``, and so asyncssh, when it is called).

Errors are collected, not stopped at: one ``ConfigError`` names every invalid key with its
dotted path, one per line::

    config.toml: 2 invalid keys
      hosts[1].units[0]: 'vllm; touch /tmp/pwned' is not a valid systemd unit name or glob: ...
      exporter.listen: expected host:port, e.g. 127.0.0.1:9842 or [::1]:9842

Rules worth knowing (``config.example.toml`` documents every key):

* **Units** follow systemd's unit-name grammar (systemd.unit(5)): letters, digits and
  ``: - _ . \\``, one ``@`` for template instances, at most 255 characters, and a unit-type
  suffix such as ``.service``. A name without a suffix is rejected (write ``vllm.service``),
  never completed silently. Globs may use ``* ? [ ]`` and must end with a suffix or ``*``.
  Nothing else is accepted (spaces, ``;``, ``$``, quotes, backticks, newlines), so a unit name
  can never become shell syntax on a remote host.
* **journalctl_args** come from an allow-list of options that only choose which journal to read
  (``JOURNALCTL_OPTIONS``), each value checked for its kind (an absolute path, a name); no value
  may start with ``-``.
* A host is ``local = true`` or has an ``address``, never both. SSH keys apply to remote hosts
  only. A remote host needs ``known_hosts`` unless ``insecure_accept_any_host_key = true``,
  which is accepted with a loud entry in ``Config.warnings``.
* Hosts inherit ``gpu_poll_interval_seconds``, ``slow_factor``, ``slow_floor_seconds`` and each
  phase's ``stall_threshold_seconds`` from ``[defaults]`` unless they set their own;
  ``HostConfig`` holds the resolved values.
* ``gpu`` defaults to ``nvml`` for a local host and ``nvidia-smi`` for a remote one; NVML can
  only read this machine's GPUs, so ``gpu = "nvml"`` on a remote host is an error.
* No ``[[hosts]]`` at all means one local host watching ``vllm*.service`` (``default_config``).
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import ipaddress
import os
import re
import socket
import tomllib
import types
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from vllm_sentinel.engine.catalog.causes import DEFAULT_BENIGN_PATTERNS, BenignMatcher
from vllm_sentinel.engine.catalog.phases import STARTUP_PHASES, Phase
from vllm_sentinel.engine.decode.unit_name import UNIT_TYPES
from vllm_sentinel.engine.health import ProbePolicy, ProbeSettings
from vllm_sentinel.engine.stall import DEFAULT_SLOW_FACTOR, DEFAULT_SLOW_FLOOR_SECONDS
from vllm_sentinel.errors import ConfigError, StateDirectoryError

if TYPE_CHECKING:  # imported where used: asyncssh (0.2 s) is not for check-config
    from vllm_sentinel.sources.transport import SshSettings

__all__ = [
    "DEFAULT_UNITS",
    "JOURNALCTL_FLAGS",
    "JOURNALCTL_OPTIONS",
    "JOURNALCTL_VALUE_OPTIONS",
    "UNIT_SUFFIXES",
    "Config",
    "DefaultsConfig",
    "ExporterConfig",
    "GpuBackend",
    "HealthProbeConfig",
    "HealthProbeUnitConfig",
    "HostConfig",
    "StallThresholds",
    "check_config",
    "default_config",
    "host_name_from",
    "is_host_name",
    "load_config",
    "local_host_name",
    "parse_config",
    "parse_listen_address",
    "parse_shard",
    "run_state_directory",
    "shard_of",
    "validate_unit_pattern",
]

UNIT_SUFFIXES: frozenset[str] = UNIT_TYPES
"""Unit types systemd knows (systemd.unit(5)): ``unit_name.UNIT_TYPES``, the one table."""

DEFAULT_UNITS: tuple[str, ...] = ("vllm*.service",)
"""Units a host watches when its table has no ``units`` key."""


class _ArgValue(StrEnum):
    """What the value of an allowed ``journalctl_args`` option may be."""

    PATH = "an absolute path"
    PATH_GLOB = "an absolute path (globs allowed)"
    NAME = "a name of letters, digits and '_.-'"
    NAMESPACE = "a namespace name of letters, digits and '_.-', or '*', or '+' and a name"


JOURNALCTL_OPTIONS: Mapping[str, tuple[_ArgValue, str]] = types.MappingProxyType(
    {
        "--directory": (_ArgValue.PATH, "a directory of journal files (journal-remote)"),
        "--file": (_ArgValue.PATH_GLOB, "journal files by name"),
        "--root": (_ArgValue.PATH, "the journal of another OS tree (a mounted image)"),
        "--machine": (_ArgValue.NAME, "a local container's journal (systemd-machined)"),
        "--namespace": (_ArgValue.NAMESPACE, "a journal namespace (journald@NAMESPACE)"),
    }
)
"""journalctl options allowed in ``journalctl_args``, written ``--option=value``: only those
that choose which journal is read (journalctl(1)); each with what its value may be and why it
is there. Anything that changes the output (``--output``), the entries (``--since``, matches)
or runs something (``--image`` loop-mounts a file) is refused: the daemon sets those itself."""

JOURNALCTL_VALUE_OPTIONS: frozenset[str] = frozenset(JOURNALCTL_OPTIONS)
"""The option names of ``JOURNALCTL_OPTIONS``."""

JOURNALCTL_FLAGS: frozenset[str] = frozenset({"--merge", "-m", "--user", "--system"})
"""journalctl flags allowed in ``journalctl_args`` as they are: which journals to interleave
(``--merge``: all of them; ``--user``/``--system``: the user's or the system's)."""

_UNIT_MAX = 255
_UNIT_CHARS = re.compile(r"[A-Za-z0-9:_.\\@-]")
_GLOB_CHARS = frozenset("*?[]")
_UNIT_NAME = re.compile(r"(?P<prefix>[A-Za-z0-9:_.\\-]+)(?:@(?P<instance>[A-Za-z0-9:_.\\-]*))?")
_HOST_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_ADDRESS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.:%_-]{0,252})")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]{0,63}")
_DNS_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
_ARG_FORBIDDEN = frozenset(";&|<>()$`'\"\\!{}~#")
_ARG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_SEEN_HOST_NAMES = "seen_host_names"
_REMOTE_ONLY_KEYS = (
    "port",
    "user",
    "client_keys",
    "insecure_accept_any_host_key",
    "known_hosts",
    "connect_timeout_seconds",
    "keepalive_interval_seconds",
    "keepalive_count_max",
    "passphrase",
)
_INHERITED_KEYS = (  # besides stall_threshold_seconds, merged
    "gpu_poll_interval_seconds",
    "slow_factor",
    "slow_floor_seconds",
)
_DEFAULT_GPU_POLL_INTERVAL_SECONDS = 2.0
_MAX_SHARDS = 1024

# Scalars are strict (TOML "600" is not a number, 1 is not true); arrays and enums come from TOML
# as lists and strings, so those fields relax strictness for themselves only.
_MODEL_CONFIG = ConfigDict(
    extra="forbid", frozen=True, strict=True, allow_inf_nan=False, validate_default=False
)


class GpuBackend(StrEnum):
    """How a host's GPU memory is read."""

    NVML = "nvml"  # the NVML library, in this process: local hosts only
    NVIDIA_SMI = "nvidia-smi"  # nvidia-smi over the host's transport
    NONE = "none"  # no GPU readings


# --- field checks ------------------------------------------------------------------------------


def _describe_char(char: str) -> str:
    if char == "\n":
        return "a newline"
    if char.isspace():
        return "whitespace"
    if not char.isprintable():
        return f"the control character {char!r}"
    return repr(char)


def _has_balanced_brackets(value: str) -> bool:
    is_open = False
    for char in value:
        if char == "[":
            if is_open:
                return False
            is_open = True
        elif char == "]":
            if not is_open:
                return False
            is_open = False
    return not is_open


def validate_unit_pattern(value: str) -> str:
    """Return ``value`` if it is a systemd unit name or glob; ``ValueError`` says why not."""
    head = f"{value!r} is not a valid systemd unit name or glob"
    if not value:
        raise ValueError(f"{head}: it is empty")
    if len(value) > _UNIT_MAX:
        raise ValueError(f"{head}: longer than {_UNIT_MAX} characters")
    for char in value:
        if char not in _GLOB_CHARS and not _UNIT_CHARS.fullmatch(char):
            raise ValueError(
                f"{head}: {_describe_char(char)} is not allowed (use letters, digits and "
                "':-_.\\@', with '*?[]' for globs)"
            )
    if value.startswith("-"):
        raise ValueError(f"{head}: it must not start with '-'")
    if value.count("@") > 1:
        raise ValueError(f"{head}: at most one '@' is allowed")
    if not _has_balanced_brackets(value):
        raise ValueError(f"{head}: '[' and ']' must pair up, without nesting")
    is_glob = any(char in _GLOB_CHARS for char in value)
    stem, dot, suffix = value.rpartition(".")
    if is_glob:
        if value.endswith("*") or (dot and suffix in UNIT_SUFFIXES):
            return value
        raise ValueError(f"{head}: a glob must end with a unit type such as '.service', or '*'")
    if not dot or suffix not in UNIT_SUFFIXES:
        raise ValueError(
            f"{head}: it needs a unit type suffix such as '.service' (write {value + '.service'!r})"
        )
    if not _UNIT_NAME.fullmatch(stem):
        raise ValueError(f"{head}: the name before '@' or the suffix is empty")
    return value


def _check_journalctl_arg(value: str) -> str:
    for char in value:
        if not char.isprintable() or char.isspace():
            raise ValueError(f"{value!r}: {_describe_char(char)} is not allowed")
    if value in JOURNALCTL_FLAGS:
        return value
    option, equals, argument = value.partition("=")
    allowed_value = JOURNALCTL_OPTIONS.get(option)
    if allowed_value is not None and equals:
        if not argument:
            raise ValueError(f"{value!r}: the option needs a value after '='")
        bad = sorted({char for char in argument if char in _ARG_FORBIDDEN})
        if bad:
            raise ValueError(
                f"{value!r}: {', '.join(repr(char) for char in bad)} not allowed in the value"
            )
        kind = allowed_value[0]
        if argument.startswith("-"):
            raise ValueError(f"{value!r}: the value must not start with '-' (it must be {kind})")
        if kind in (_ArgValue.PATH, _ArgValue.PATH_GLOB):
            if not argument.startswith("/"):
                raise ValueError(f"{value!r}: the value must be {kind}")
            if kind is _ArgValue.PATH and any(char in argument for char in "*?[]"):
                raise ValueError(f"{value!r}: the value must be {kind}, without globs")
        elif not _ARG_NAME.fullmatch(
            argument[1:] if kind is _ArgValue.NAMESPACE and argument[:1] == "+" else argument
        ) and not (kind is _ArgValue.NAMESPACE and argument == "*"):
            raise ValueError(f"{value!r}: the value must be {kind}")
        return value
    allowed = sorted(f"{option}=" for option in JOURNALCTL_VALUE_OPTIONS) + sorted(JOURNALCTL_FLAGS)
    raise ValueError(
        f"{value!r} is not an allowed journalctl option (allowed: {', '.join(allowed)})"
    )


def _check_benign_pattern(value: str) -> str:
    if not value:
        raise ValueError("an empty pattern would match every line")
    try:
        re.compile(value)
        re.compile(f"(?:{value})")  # how BenignMatcher joins the patterns
    except re.error as error:
        raise ValueError(f"{value!r} does not compile as a Python regex: {error}") from None
    return value


def parse_listen_address(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:9842`` for IPv6; ``:9842`` for every IPv4 interface).

    Raises:
        ValueError: the text is not a valid listen address.
    """
    usage = "expected host:port, e.g. 127.0.0.1:9842 or [::1]:9842"
    host, colon, port_text = value.rpartition(":")
    if not colon:
        raise ValueError(f"{value!r}: {usage}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"{value!r}: write an IPv6 address in brackets, e.g. [::1]:9842")
    elif host and not _DNS_NAME.fullmatch(host):
        raise ValueError(f"{value!r}: {host!r} is not a host name or IPv4 address")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"{value!r}: {usage}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"{value!r}: port {port} is not in 1-65535")
    return host, port


def _check_listen(value: str) -> str:
    parse_listen_address(value)
    return value


def parse_shard(value: str) -> tuple[int, int]:
    """Split ``"i/n"`` (this instance is shard ``i`` of ``n``, ``1 <= i <= n <= 1024``).

    Raises:
        ValueError: the text is not ``i/n`` with those bounds.
    """
    index_text, slash, count_text = value.partition("/")
    numbers = (index_text, count_text)
    if not slash or not all(text.isascii() and text.isdigit() for text in numbers):
        raise ValueError(f'{value!r}: expected "i/n", e.g. "1/3" (this instance is shard 1 of 3)')
    index, count = int(index_text), int(count_text)
    if not 1 <= count <= _MAX_SHARDS:
        raise ValueError(f"{value!r}: the number of shards must be 1-{_MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ValueError(f"{value!r}: the shard must be 1-{count}")
    return index, count


def shard_of(host_name: str, count: int) -> int:
    """The shard (1 to ``count``) that watches ``host_name``: rendezvous hashing of the name.

    Each shard ``j`` scores the name with SHA-256 of ``"j/name"``; the highest score wins. The
    result depends on the name and ``count`` only (the same in every instance and every run),
    and going from ``n`` to ``n + 1`` shards moves only the hosts the new shard wins: about
    ``1 / (n + 1)`` of them.
    """
    return max(
        range(1, count + 1),
        key=lambda shard: hashlib.sha256(f"{shard}/{host_name}".encode()).digest(),
    )


def _check_shard(value: str) -> str:
    parse_shard(value)
    return value


UnitPattern = Annotated[str, AfterValidator(validate_unit_pattern)]
JournalctlArg = Annotated[str, AfterValidator(_check_journalctl_arg)]
BenignPattern = Annotated[str, AfterValidator(_check_benign_pattern)]


# --- models ------------------------------------------------------------------------------------


class ExporterConfig(BaseModel):
    """Where and how the HTTP endpoints (/metrics, /status, /healthz) are served."""

    model_config = _MODEL_CONFIG

    listen: Annotated[str, AfterValidator(_check_listen)] = "127.0.0.1:9842"
    tls_cert_file: str = ""
    tls_key_file: str = Field(default="", validate_default=True)
    web_config_file: str = ""
    max_connections: Annotated[int, Field(ge=1, le=4096)] = 64
    request_read_timeout_seconds: Annotated[float, Field(ge=0.5, le=300.0)] = 10.0

    @field_validator("tls_key_file", mode="after")
    @classmethod
    def _check_tls_pair(cls, value: str, info: ValidationInfo) -> str:
        cert = info.data.get("tls_cert_file")
        if cert is not None and bool(cert) != bool(value):
            raise ValueError("set tls_cert_file and tls_key_file together, or neither")
        return value

    @field_validator("web_config_file", mode="after")
    @classmethod
    def _check_one_tls_source(cls, value: str, info: ValidationInfo) -> str:
        if value and (info.data.get("tls_cert_file") or info.data.get("tls_key_file")):
            raise ValueError(
                "set either web_config_file (TLS in its tls_server_config) or "
                "tls_cert_file/tls_key_file, not both"
            )
        return value

    @property
    def listen_host(self) -> str:
        """The host part of ``listen`` (brackets removed; empty means every IPv4 interface)."""
        return parse_listen_address(self.listen)[0]

    @property
    def listen_port(self) -> int:
        """The port part of ``listen``."""
        return parse_listen_address(self.listen)[1]

    @property
    def has_tls(self) -> bool:
        """True when TLS files are configured here (``web_config_file`` may add TLS too)."""
        return bool(self.tls_cert_file)


class StallThresholds(BaseModel):
    """Seconds a startup phase may last without progress before the unit counts as stalled.

    One field per startup phase (``phases.STARTUP_PHASES``); defaults are sized for 1T-parameter
    models on 8 GPUs.
    """

    model_config = _MODEL_CONFIG

    starting: float = Field(default=600.0, gt=0)
    initializing: float = Field(default=900.0, gt=0)
    loading_weights: float = Field(default=600.0, gt=0)
    compiling: float = Field(default=900.0, gt=0)
    profiling_kv_cache: float = Field(default=600.0, gt=0)
    capturing_cuda_graphs: float = Field(default=600.0, gt=0)
    starting_api_server: float = Field(default=300.0, gt=0)

    def by_phase(self) -> Mapping[Phase, float]:
        """Return the thresholds keyed by phase."""
        return types.MappingProxyType(
            {phase: float(getattr(self, phase.value)) for phase in STARTUP_PHASES}
        )


class HealthProbeUnitConfig(BaseModel):
    """A unit's (or glob's) overrides of its host's ``health_probe``; unset keys inherit."""

    model_config = _MODEL_CONFIG

    enabled: bool | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    interval_seconds: float | None = Field(default=None, ge=0.5, le=3600)
    timeout_seconds: float | None = Field(default=None, gt=0, le=600)
    unhealthy_after_seconds: float | None = Field(default=None, ge=0, le=86_400)
    served_models: bool | None = None


class HealthProbeConfig(BaseModel):
    """Readiness probing of the units' vLLM ``/health`` (``health.py``, ``probe.py``).

    ``port`` (unset: the port vLLM logs) suits a host with one unit; ``units`` overrides any
    key for unit names or globs (an exact name before globs, then globs in file order).
    """

    model_config = _MODEL_CONFIG

    enabled: bool = False
    port: int | None = Field(default=None, ge=1, le=65535)
    interval_seconds: float = Field(default=10.0, ge=0.5, le=3600)
    timeout_seconds: float = Field(default=5.0, gt=0, le=600)
    unhealthy_after_seconds: float = Field(default=60.0, ge=0, le=86_400)
    served_models: bool = True
    units: dict[UnitPattern, HealthProbeUnitConfig] = Field(default_factory=dict)

    def _settings(self, override: HealthProbeUnitConfig | None = None) -> ProbeSettings:
        values = self.model_dump(exclude={"units"})
        if override is not None:
            values.update(override.model_dump(exclude_none=True))
        return ProbeSettings(**values)

    def policy(self) -> ProbePolicy:
        """Return the resolved settings: the host's, and each unit override merged over them."""
        patterns = sorted(self.units, key=lambda pattern: any(c in pattern for c in "*?["))
        return ProbePolicy(
            self._settings(),
            tuple((pattern, self._settings(self.units[pattern])) for pattern in patterns),
        )


class DefaultsConfig(BaseModel):
    """Settings for every host; hosts may override the GPU poll interval and stall thresholds."""

    model_config = _MODEL_CONFIG

    gpu_poll_interval_seconds: float = Field(
        default=_DEFAULT_GPU_POLL_INTERVAL_SECONDS, ge=0.1, le=3600
    )
    stall_min_growth_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    backfill_max_records: int = Field(default=200_000, ge=1)
    backfill_max_invocations: int = Field(default=3, ge=1)
    backfill_max_age_seconds: float = Field(default=86_400.0, gt=0)
    benign_patterns: tuple[BenignPattern, ...] = Field(
        default=DEFAULT_BENIGN_PATTERNS, strict=False
    )
    crash_settle_seconds: float = Field(default=30.0, ge=1, le=3600)
    traceback_hold_seconds: float = Field(default=300.0, ge=0, le=86_400)
    forget_unit_after_seconds: float = Field(default=604_800.0, ge=0)
    state_directory: str = Field(default="/var/lib/vllm-sentinel", min_length=1)
    cursor_flush_interval_seconds: float = Field(default=1.0, gt=0, le=3600)
    unit_discovery_interval_seconds: float = Field(default=30.0, gt=0, le=3600)
    stall_threshold_seconds: StallThresholds = StallThresholds()
    health_probe: HealthProbeConfig = HealthProbeConfig()
    slow_factor: float = Field(default=DEFAULT_SLOW_FACTOR, gt=1, le=100)
    slow_floor_seconds: float = Field(default=DEFAULT_SLOW_FLOOR_SECONDS, ge=0, le=86_400)

    @field_validator("benign_patterns", mode="after")
    @classmethod
    def _check_patterns_together(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            BenignMatcher(value)
        except re.error as error:
            raise ValueError(f"the patterns do not compile together: {error}") from None
        return value


class HostConfig(BaseModel):
    """One host to watch: how to reach it, which units, how to read its GPUs.

    ``gpu_poll_interval_seconds`` and ``stall_threshold_seconds`` hold the values in effect,
    inherited from ``[defaults]`` where the host table does not set them.
    """

    model_config = _MODEL_CONFIG

    name: str
    local: bool = False
    address: str | None = Field(default=None, validate_default=True)
    port: int = Field(default=22, ge=1, le=65535)
    user: str | None = None
    client_keys: tuple[str, ...] = Field(default=(), strict=False)
    insecure_accept_any_host_key: bool = False
    known_hosts: str = "~/.ssh/known_hosts"
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    keepalive_interval_seconds: float = Field(default=15.0, ge=0, le=3600)
    keepalive_count_max: int = Field(default=3, ge=1, le=100)
    passphrase: SecretStr | None = Field(default=None, strict=False)
    units: tuple[UnitPattern, ...] = Field(default=DEFAULT_UNITS, strict=False)
    journalctl_args: tuple[JournalctlArg, ...] = Field(default=(), strict=False)
    gpu: GpuBackend = Field(default=GpuBackend.NVML, strict=False)
    gpu_poll_interval_seconds: float = Field(
        default=_DEFAULT_GPU_POLL_INTERVAL_SECONDS, ge=0.1, le=3600
    )
    stall_threshold_seconds: StallThresholds = StallThresholds()
    health_probe: HealthProbeConfig = HealthProbeConfig()
    slow_factor: float = Field(default=DEFAULT_SLOW_FACTOR, gt=1, le=100)
    slow_floor_seconds: float = Field(default=DEFAULT_SLOW_FLOOR_SECONDS, ge=0, le=86_400)

    @model_validator(mode="before")
    @classmethod
    def _default_gpu(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "gpu" not in data:
            remote = data.get("local") is not True
            return {**data, "gpu": GpuBackend.NVIDIA_SMI if remote else GpuBackend.NVML}
        return data

    @field_validator("name", mode="after")
    @classmethod
    def _check_name(cls, value: str, info: ValidationInfo) -> str:
        if not _HOST_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid host name: 1-64 of the characters A-Z a-z 0-9 _ . : -"
            )
        seen = info.context.get(_SEEN_HOST_NAMES) if isinstance(info.context, dict) else None
        if isinstance(seen, set):
            if value in seen:
                raise ValueError(f"host name {value!r} is used by an earlier host")
            seen.add(value)
        return value

    @field_validator("address", mode="after")
    @classmethod
    def _check_address(cls, value: str | None, info: ValidationInfo) -> str | None:
        local = info.data.get("local")
        if value is None:
            if local is False:
                raise ValueError("a host needs local = true or an address to reach it over SSH")
            return value
        if local:
            raise ValueError("set either local = true or address, not both")
        if not _ADDRESS.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid host name or IP address")
        return value

    @field_validator(*_REMOTE_ONLY_KEYS, mode="after")
    @classmethod
    def _check_remote_only(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("local") is True:
            raise ValueError("applies to remote hosts only (this host is local = true)")
        return value

    @field_validator("user", mode="after")
    @classmethod
    def _check_user(cls, value: str | None) -> str | None:
        if value is not None and not _USER.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid user name")
        return value

    @field_validator("known_hosts", mode="after")
    @classmethod
    def _check_known_hosts(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.data.get("insecure_accept_any_host_key") is False:
            raise ValueError(
                "a remote host needs a known_hosts file (or insecure_accept_any_host_key = true)"
            )
        return value

    @field_validator("units", mode="after")
    @classmethod
    def _check_units_present(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("list at least one unit name or glob")
        return value

    @field_validator("gpu", mode="after")
    @classmethod
    def _check_gpu(cls, value: GpuBackend, info: ValidationInfo) -> GpuBackend:
        if value is GpuBackend.NVML and info.data.get("address"):
            raise ValueError(
                'gpu = "nvml" reads only this machine\'s GPUs; use gpu = "nvidia-smi" for a '
                "remote host"
            )
        return value

    @field_serializer("passphrase")
    def _hide_passphrase(self, value: SecretStr | None) -> str | None:
        return None if value is None else "***"

    def ssh_settings(self) -> SshSettings | None:
        """Return how to reach this host over SSH, or ``None`` for the local host."""
        if self.address is None:
            return None
        from vllm_sentinel.sources.transport import SshSettings

        return SshSettings(
            address=self.address,
            port=self.port,
            user=self.user,
            client_keys=self.client_keys,
            known_hosts=self.known_hosts or None,
            insecure_accept_any_host_key=self.insecure_accept_any_host_key,
            connect_timeout_seconds=self.connect_timeout_seconds,
            keepalive_interval_seconds=self.keepalive_interval_seconds,
            keepalive_count_max=self.keepalive_count_max,
            passphrase=None if self.passphrase is None else self.passphrase.get_secret_value(),
        )

    def stall_thresholds(self) -> Mapping[Phase, float]:
        """Return the stall threshold of each startup phase, in seconds."""
        return self.stall_threshold_seconds.by_phase()

    def probe_policy(self) -> ProbePolicy:
        """Return how this host's units are probed (``[defaults.health_probe]`` merged in)."""
        return self.health_probe.policy()


def is_host_name(name: str) -> bool:
    """Whether ``name`` may be a host's name (the ``host`` label): the config's rule for
    ``[[hosts]] name``."""
    return _HOST_NAME.fullmatch(name) is not None


def host_name_from(text: str) -> str:
    """``text`` (a directory's name) made a host's name: every character the rule does not
    allow becomes ``_``, cut to its length; ``journal`` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9_.:-]", "_", text)[:64]
    return name if is_host_name(name) else "journal"


def local_host_name() -> str:
    """This machine's short host name, as the default config names the local host (the
    daemon's ``host`` label; ``localhost`` when the name is not a valid label)."""
    return _local_host_name()


def _local_host_name() -> str:
    name = socket.gethostname().split(".", 1)[0]
    return name if _HOST_NAME.fullmatch(name) else "localhost"


def _default_hosts() -> tuple[HostConfig, ...]:
    return (HostConfig(name=_local_host_name(), local=True, units=DEFAULT_UNITS),)


class Config(BaseModel):
    """The whole, validated configuration (frozen)."""

    model_config = _MODEL_CONFIG

    shard: Annotated[str, AfterValidator(_check_shard)] = "1/1"
    exporter: ExporterConfig = ExporterConfig()
    defaults: DefaultsConfig = DefaultsConfig()
    hosts: tuple[HostConfig, ...] = Field(default_factory=_default_hosts, strict=False)

    @field_validator("hosts", mode="after")
    @classmethod
    def _check_hosts_present(cls, value: tuple[HostConfig, ...]) -> tuple[HostConfig, ...]:
        if not value:
            raise ValueError("list at least one [[hosts]] table, or leave hosts out entirely")
        return value

    @model_validator(mode="before")
    @classmethod
    def _inherit_defaults(cls, data: Any) -> Any:
        """Fill each host table's unset overridable keys from a valid ``[defaults]``."""
        if not isinstance(data, Mapping) or not isinstance(data.get("hosts"), list | tuple):
            return data
        raw_defaults = data.get("defaults", {})
        try:
            defaults = DefaultsConfig.model_validate(raw_defaults)
        except ValidationError:
            return data  # reported once, at its own path, by the field validation
        thresholds = defaults.stall_threshold_seconds.model_dump()
        probe = defaults.health_probe.model_dump(exclude={"units"})
        probe_units = {
            pattern: override.model_dump(exclude_none=True)
            for pattern, override in defaults.health_probe.units.items()
        }
        hosts: list[Any] = []
        for raw_host in data["hosts"]:
            if not isinstance(raw_host, Mapping):
                hosts.append(raw_host)
                continue
            host = dict(raw_host)
            for key in _INHERITED_KEYS:
                host.setdefault(key, getattr(defaults, key))
            own = host.get("stall_threshold_seconds", {})
            if isinstance(own, Mapping):
                host["stall_threshold_seconds"] = {**thresholds, **own}
            own_probe = host.get("health_probe", {})
            if isinstance(own_probe, Mapping):
                own_units = own_probe.get("units", {})
                units = (
                    {**probe_units, **own_units} if isinstance(own_units, Mapping) else own_units
                )
                host["health_probe"] = {**probe, **own_probe, "units": units}
            hosts.append(host)
        return {**data, "hosts": hosts}

    @model_validator(mode="after")
    def _check_unique_names(self) -> Config:
        names = [host.name for host in self.hosts]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"host names must be unique: {', '.join(duplicates)}")
        return self

    @property
    def watched_hosts(self) -> tuple[HostConfig, ...]:
        """The hosts this instance watches: those of its ``shard`` (all of them with ``1/1``).

        Instances sharing one host list with ``shard = "1/n"`` … ``"n/n"`` watch each host
        exactly once (``shard_of``).
        """
        index, count = parse_shard(self.shard)
        if count == 1:
            return self.hosts
        return tuple(host for host in self.hosts if shard_of(host.name, count) == index)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Accepted but risky settings, one sentence each, for logs and ``check-config``."""
        found: list[str] = []
        if not self.watched_hosts:
            found.append(
                f"shard = {self.shard!r} watches none of the {len(self.hosts)} hosts: "
                "this instance serves no unit"
            )
        for index, host in enumerate(self.hosts):
            if host.address is not None and host.insecure_accept_any_host_key:
                found.append(
                    f"INSECURE: hosts[{index}] ({host.name}): insecure_accept_any_host_key = "
                    "true: the SSH host key is not checked, so anyone on the network path can "
                    "impersonate this host and read what the daemon sends"
                )
        exporter = self.exporter
        if not _is_loopback(exporter.listen_host) and not (
            exporter.has_tls or exporter.web_config_file
        ):
            found.append(
                f"exporter.listen = {exporter.listen!r} is reachable from other machines and "
                "serves /metrics and /status without TLS or authentication; set web_config_file"
            )
        return tuple(found)

    def redacted(self) -> dict[str, Any]:
        """Return the configuration as JSON-ready data for ``/status``: no passphrases."""
        data = self.model_dump(mode="json")
        for host, dumped in zip(self.hosts, data["hosts"], strict=True):
            if host.local:
                for key in _REMOTE_ONLY_KEYS:
                    dumped.pop(key, None)
        data["warnings"] = list(self.warnings)
        return data


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- loading -----------------------------------------------------------------------------------


def _format_path(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "(top level)"


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            annotation = options[0] if len(options) == 1 else None
        else:
            return annotation


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """Return the model whose table is at ``loc`` (for "did you mean" hints)."""
    current: Any = Config
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            args = get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            current = field.annotation if field is not None else None
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


_TOML_TYPES = {
    bool: "a boolean",
    int: "an integer",
    float: "a float",
    str: "a string",
    list: "an array",
    dict: "a table",
}


def _toml_type(value: object) -> str:
    """Name the TOML type of a value, never the value itself (it may be a secret)."""
    return _TOML_TYPES.get(type(value), "a date or time")


def _describe_error(error: ErrorDetails) -> str:
    loc = error["loc"]
    kind = error["type"]
    message = error["msg"]
    if kind in ("value_error", "assertion_error"):
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    elif kind == "extra_forbidden":
        message = "unknown key"
        model = _model_at(loc[:-1])
        if model is not None and isinstance(loc[-1], str):
            close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
    elif kind == "missing":
        message = "required key is missing"
    elif kind in ("tuple_type", "list_type"):
        message = f"should be an array, not {_toml_type(error['input'])}"
    elif kind == "model_type":
        message = f"should be a table, not {_toml_type(error['input'])}"
    elif kind.endswith("_type"):
        message = f"{message}, not {_toml_type(error['input'])}"
    return f"{_format_path(loc)}: {message}"


def parse_config(text: str, source: str = "<string>") -> Config:
    """Parse and validate TOML text.

    Raises:
        ConfigError: the text is not TOML, or keys are invalid (all of them are named).
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: invalid TOML: {error}") from None
    try:
        return Config.model_validate(raw, context={_SEEN_HOST_NAMES: set()})
    except ValidationError as error:
        problems = list(dict.fromkeys(_describe_error(item) for item in error.errors()))
        noun = "invalid key" if len(problems) == 1 else "invalid keys"
        lines = [f"{source}: {len(problems)} {noun}", *(f"  {line}" for line in problems)]
        raise ConfigError("\n".join(lines)) from None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a configuration file.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 TOML, or has invalid keys.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{os.fspath(path)}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{os.fspath(path)}: not UTF-8 text: {error.reason}") from None
    return parse_config(text, source=os.fspath(path))


def default_config() -> Config:
    """Return the configuration used without a file: this host's ``vllm*.service`` units, NVML."""
    return Config()


def _missing_files(config: Config) -> list[str]:
    checks: list[tuple[str, str]] = []
    for index, host in enumerate(config.hosts):
        if host.address is None:
            continue
        if not host.insecure_accept_any_host_key:
            checks.append((f"hosts[{index}].known_hosts", host.known_hosts))
        checks += [
            (f"hosts[{index}].client_keys[{key_index}]", key)
            for key_index, key in enumerate(host.client_keys)
        ]
    return [
        f"{key}: file {path!r} does not exist or is not readable here"
        for key, path in checks
        if path and not os.access(os.path.expanduser(path), os.R_OK)
    ]


def _state_directory_problem(directory: str) -> tuple[str, int] | None:
    """What ``run`` (as this user) would say of ``directory`` (``cursor_store``'s words) and
    the errno, or ``None`` when it could create and write it: a file is created and removed
    there (a directory in its nearest existing parent when it does not exist yet), so that what
    only trying tells (``/proc`` refuses new entries even to root) is found too.
    """
    import tempfile

    path = os.path.abspath(os.path.expanduser(directory))
    try:
        if os.path.isdir(path):
            descriptor, name = tempfile.mkstemp(prefix=".check-config.", dir=path)
            os.close(descriptor)
            os.unlink(name)
            return None
        if os.path.lexists(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        parent = os.path.dirname(path)
        while not os.path.lexists(parent):  # run creates the missing parents too
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        os.rmdir(tempfile.mkdtemp(prefix=".check-config.", dir=parent))
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        return str(StateDirectoryError.unwritable(path, reason)), error.errno or 0
    return None


def _only_this_user_refused(code: int) -> bool:
    """True when a state directory refused with errno ``code`` may still be writable by the
    service's user: permission denied to an unprivileged user (root would not be denied for
    permissions, so root's refusal is everyone's). Any other refusal (not a directory, ``/proc``,
    a read-only file system) is every user's."""
    return code in (errno.EACCES, errno.EPERM) and os.geteuid() != 0


def run_state_directory(config: Config) -> str:
    """The state directory ``run`` uses with ``config`` here (the daemon's rule): the configured
    one, or systemd's ``$STATE_DIRECTORY`` (``StateDirectory=``) when the config leaves the
    default."""
    directory = config.defaults.state_directory
    from_systemd = os.environ.get("STATE_DIRECTORY")
    if from_systemd and directory == "/var/lib/vllm-sentinel":
        return from_systemd.split(":")[0]
    return directory


def check_config(path: str | os.PathLike[str]) -> list[str]:
    """Validate a file and summarise it for ``vllm-sentinel check-config``, one line per item.

    The exporter's web config file and TLS files are read exactly as ``run`` reads them
    (``web_config.load_exporter_security``): one that ``run`` would refuse is an error here too.
    SSH files (known_hosts, client keys) are checked for presence only, and a missing one is a
    warning: it may be deployed after the config (the host's collector reports it). The state
    directory ``run`` would use (``run_state_directory``) is tried as ``run`` tries it: when no
    user could create or write it (not a directory, ``/proc``, read-only), ``run`` refuses to
    start and so does this check; permission denied to an unprivileged user is a warning (the
    service may run as another user, who may be allowed).

    Raises:
        ConfigError: the file is invalid (the CLI exits 2 with the message).
        StateDirectoryError: the state directory cannot be written, in ``run``'s words.
    """
    config = load_config(path)
    from vllm_sentinel.serve.web_config import load_exporter_security  # the daemon's own check

    security = load_exporter_security(config.exporter)
    problem = _state_directory_problem(run_state_directory(config))
    if problem is not None and not _only_this_user_refused(problem[1]):
        raise StateDirectoryError(problem[0])  # run's words: it refuses to start
    exporter = config.exporter
    mode = (
        "web config " + exporter.web_config_file
        if exporter.web_config_file
        else "TLS"
        if exporter.has_tls
        else "plain HTTP, no authentication"
    )
    unit_count = sum(len(host.units) for host in config.hosts)
    lines = [
        f"{os.fspath(path)}: OK",
        f"exporter: listening on {exporter.listen} ({mode})",
        f"hosts: {len(config.hosts)}, unit names or globs: {unit_count}",
    ]
    for host in config.hosts:
        if host.address is None:
            where = "local"
        else:
            user = f"{host.user}@" if host.user else ""
            where = f"ssh {user}{host.address}:{host.port}"
        lines.append(f"  {host.name}: {where}, gpu {host.gpu}, units {', '.join(host.units)}")
    if config.shard != "1/1":
        watched = [host.name for host in config.watched_hosts]
        lines.append(
            f"shard {config.shard}: watches {len(watched)} of {len(config.hosts)} hosts"
            + (f": {', '.join(watched)}" if watched else "")
        )
    if "hosts" not in config.model_fields_set:
        lines.append(
            "warning: no [[hosts]] table: `run` watches this machine's "
            f"{', '.join(DEFAULT_UNITS)} units, and a reload (SIGHUP) refuses such a file"
        )
    warnings = [*config.warnings, *_missing_files(config)]
    if problem is not None:  # permission denied to this user: the service's may be allowed
        warnings.append(f"{problem[0]}; as this user: the service's user may be allowed")
    if security.basic_auth_without_tls:
        warnings.append(
            f"exporter.web_config_file: {exporter.web_config_file} has basic_auth_users "
            "without tls_server_config: passwords travel in clear text"
        )
    lines += [f"warning: {text}" for text in warnings]
    return lines
