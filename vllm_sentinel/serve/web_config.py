"""The exporter's TLS and basic-auth settings: a web config file or TLS files → what the HTTP
server needs (setup: no asyncio, no logging, no exporter).

TLS and basic auth come from a Prometheus exporter-toolkit *web config* file::

    tls_server_config:
      cert_file: server.crt        # relative paths are relative to the web config file
      key_file: server.key
      min_version: TLS12           # TLS12 (default) or TLS13
    basic_auth_users:
      prometheus: $2y$10$...       # bcrypt hash (htpasswd -nbB user password)

Keys the server does not implement (client certificates, cipher suites, extra headers) are
rejected rather than ignored, so a config never silently means less than it says.

``load_exporter_security`` is the one reader of these settings: the daemon runs it before it
serves, ``check-config`` runs the same function (a file that passes the check is one the
daemon starts with). This module imports nothing of the daemon's edges, so ``check-config``
stays light.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml  # type: ignore[import-untyped, unused-ignore]  # types-PyYAML optional

from vllm_sentinel.errors import ConfigError

__all__ = [
    "ExporterFiles",
    "ExporterSecurity",
    "TlsServerConfig",
    "WebConfig",
    "build_ssl_context",
    "load_exporter_security",
    "load_web_config",
]

_BCRYPT_HASH = re.compile(r"\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}")
_TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_TLS_KEYS = frozenset(
    {"cert_file", "key_file", "min_version", "max_version", "client_auth_type", "client_ca_file"}
)
_TOP_KEYS = frozenset({"tls_server_config", "basic_auth_users", "http_server_config"})


@dataclass(frozen=True, slots=True)
class TlsServerConfig:
    """The ``tls_server_config`` section: the server's certificate chain and key files."""

    cert_file: Path
    key_file: Path
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion | None = None


@dataclass(frozen=True, slots=True)
class WebConfig:
    """An exporter-toolkit web config: optional TLS, optional basic-auth users.

    Attributes:
        tls: the TLS section, or ``None`` for plain HTTP.
        basic_auth_users: user name → bcrypt hash; empty for no authentication.
    """

    tls: TlsServerConfig | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)


def _tls_version(value: object, key: str) -> ssl.TLSVersion:
    if not isinstance(value, str) or value not in _TLS_VERSIONS:
        allowed = ", ".join(sorted(_TLS_VERSIONS))
        raise ConfigError(f"tls_server_config.{key}: expected one of {allowed}, got {value!r}")
    return _TLS_VERSIONS[value]


def _tls_section(raw: object, base: Path) -> TlsServerConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("tls_server_config: expected a mapping")
    unknown = sorted(str(key) for key in raw if key not in _TLS_KEYS)
    if unknown:
        raise ConfigError(f"tls_server_config: unsupported keys: {', '.join(unknown)}")
    if raw.get("client_ca_file") or raw.get("client_auth_type", "NoClientCert") != "NoClientCert":
        raise ConfigError("tls_server_config: client certificate authentication is not supported")
    paths: dict[str, Path] = {}
    for key in ("cert_file", "key_file"):
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"tls_server_config.{key}: a file name is required")
        paths[key] = base / value
    return TlsServerConfig(
        cert_file=paths["cert_file"],
        key_file=paths["key_file"],
        min_version=_tls_version(raw.get("min_version", "TLS12"), "min_version"),
        max_version=(
            _tls_version(raw["max_version"], "max_version") if raw.get("max_version") else None
        ),
    )


def _users_section(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("basic_auth_users: expected a mapping of user name to bcrypt hash")
    users: dict[str, str] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(f"basic_auth_users: invalid user name {user!r}")
        if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
            # Never echo the value: it might be a plain password pasted by mistake.
            raise ConfigError(f"basic_auth_users.{user}: not a bcrypt hash")
        users[user] = hashed
    return users


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read an exporter-toolkit web config file.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or holds a key this server does not
            implement; the message names the file and the key.
    """
    where = Path(path)
    try:
        raw: object = yaml.safe_load(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"web config {where}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"web config {where}: not valid YAML") from exc
    if raw is None:
        return WebConfig()
    try:
        if not isinstance(raw, dict):
            raise ConfigError("expected a mapping at the top level")
        unknown = sorted(str(key) for key in raw if key not in _TOP_KEYS)
        if unknown:
            raise ConfigError(f"unsupported keys: {', '.join(unknown)}")
        if raw.get("http_server_config"):
            raise ConfigError("http_server_config: not supported")
        return WebConfig(
            tls=_tls_section(raw.get("tls_server_config"), where.parent),
            basic_auth_users=_users_section(raw.get("basic_auth_users")),
        )
    except ConfigError as exc:
        raise ConfigError(f"web config {where}: {exc}") from None


_WEB_CONFIG_KEYS = ("tls_server_config.cert_file", "tls_server_config.key_file")


def build_ssl_context(
    tls: TlsServerConfig, keys: tuple[str, str] = _WEB_CONFIG_KEYS
) -> ssl.SSLContext:
    """Make a server-side TLS context from the certificate chain and key files.

    ``keys`` name the settings the two files came from, for the error message (a web config's
    ``tls_server_config.cert_file`` / ``key_file`` by default).

    Raises:
        ConfigError: a file cannot be read (``KEY: FILE: reason``, one file at a time), or
            the files are not a certificate chain and its private key.
    """
    for key, path in zip(keys, (tls.cert_file, tls.key_file), strict=True):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise ConfigError(f"{key}: {path}: {reason}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = tls.min_version
    if tls.max_version is not None:
        context.maximum_version = tls.max_version
    try:
        context.load_cert_chain(certfile=tls.cert_file, keyfile=tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        raise ConfigError(
            f"{keys[0]} / {keys[1]}: {tls.cert_file} / {tls.key_file}: not a certificate chain "
            f"and its private key ({reason})"
        ) from None
    return context


@dataclass(frozen=True, slots=True)
class ExporterSecurity:
    """What the HTTP server needs from ``[exporter]``: a TLS context, basic-auth users."""

    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def basic_auth_without_tls(self) -> bool:
        """Users are configured but no TLS: passwords travel in clear text."""
        return bool(self.basic_auth_users) and self.ssl_context is None


class ExporterFiles(Protocol):
    """The exporter settings this module reads (``config.ExporterConfig`` has them)."""

    @property
    def web_config_file(self) -> str: ...

    @property
    def has_tls(self) -> bool: ...

    @property
    def tls_cert_file(self) -> str: ...

    @property
    def tls_key_file(self) -> str: ...


def load_exporter_security(exporter: ExporterFiles) -> ExporterSecurity:
    """Read the exporter's web config file or TLS files, as the daemon serves them.

    One function for ``run`` and ``check-config``, so a file that passes the check is one the
    daemon starts with: the web config's keys, bcrypt hashes (a plain password is refused
    without being echoed), the certificate and key files, and that they belong together.

    Raises:
        ConfigError: a file is missing, unreadable or invalid (the message names it).
    """
    if exporter.web_config_file:
        web = load_web_config(exporter.web_config_file)
        try:
            ssl_context = build_ssl_context(web.tls) if web.tls is not None else None
        except ConfigError as error:
            raise ConfigError(f"web config {exporter.web_config_file}: {error}") from None
        return ExporterSecurity(ssl_context, web.basic_auth_users)
    if exporter.has_tls:
        tls = TlsServerConfig(Path(exporter.tls_cert_file), Path(exporter.tls_key_file))
        return ExporterSecurity(
            build_ssl_context(tls, ("exporter.tls_cert_file", "exporter.tls_key_file"))
        )
    return ExporterSecurity()
