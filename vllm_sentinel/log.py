"""Logging setup: structlog events and stdlib records, rendered as JSON or for a console (setup).

Named ``log`` so that it does not shadow the stdlib ``logging``. ``configure_logging`` is called
once by the CLI; it sets structlog's configuration and one handler on the stdlib root logger, so
records of libraries (asyncssh, asyncio) come out in the same format. It keeps no state of its
own; calling it again replaces what it set before.

Every line carries ``timestamp`` (ISO 8601, UTC), ``level``, ``logger`` and ``event``. Events
are snake_case subject + past verb (``config_loaded``, ``ssh_connection_lost``), with context in
keys. Values of keys that name a secret (``passphrase``, ``password``, ``secret``, ``token``…)
are replaced by ``"***"`` before rendering, also inside nested dicts and lists.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TextIO, get_args

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from vllm_sentinel.errors import ConfigError

__all__ = [
    "REDACTED",
    "LogFormat",
    "Throttle",
    "configure_logging",
    "is_secret_key",
    "redact_secrets",
]

LogFormat = Literal["console", "json"]

REDACTED = "***"
"""What a secret value is replaced with."""

_SECRET_KEY = re.compile(
    r"passphrase|passw(?:or)?d|secret|credential|api_?key|"
    r"(?:^|[_.-])(?:token|authorization)(?:$|[_.-])|token$",
    re.IGNORECASE,
)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_CHATTY_LIBRARIES = ("asyncssh",)  # INFO for every connection and channel: shown at debug only


def is_secret_key(key: str) -> bool:
    """Say whether a log key names a secret (``ssh_passphrase``, ``api_token``, ``password``)."""
    return _SECRET_KEY.search(key) is not None


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: REDACTED if isinstance(key, str) and is_secret_key(key) else _redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_redact(item) for item in value)
    return value


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Replace the values of secret-named keys with ``"***"`` (a structlog processor)."""
    for key, value in list(event_dict.items()):
        if is_secret_key(key):
            event_dict[key] = REDACTED
        elif isinstance(value, dict | list | tuple):
            event_dict[key] = _redact(value)
    return event_dict


class _SentinelHandler(logging.StreamHandler[TextIO]):
    """The root handler ``configure_logging`` installs; found and replaced on reconfiguration."""


def configure_logging(
    format: LogFormat,
    level: str,
    *,
    stream: TextIO | None = None,
) -> None:
    """Route structlog and stdlib logging to ``stream`` (stderr) as JSON or console lines.

    Args:
        format: ``json`` (one object per line) or ``console`` (aligned, coloured on a TTY).
        level: ``debug``, ``info``, ``warning``, ``error`` or ``critical`` (any case).
        stream: where lines go; stderr when omitted.

    Raises:
        ConfigError: an unknown format or level.
    """
    if format not in get_args(LogFormat):
        raise ConfigError(f"log format {format!r} is not one of: console, json")
    numeric_level = _LEVELS.get(level.lower())
    if numeric_level is None:
        raise ConfigError(f"log level {level!r} is not one of: {', '.join(_LEVELS)}")
    output = stream if stream is not None else sys.stderr

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Processor
    if format == "json":
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_is_tty(output))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
        # Not cached: module-level loggers must follow a later reconfiguration (tests, CLI).
        cache_logger_on_first_use=False,
    )

    handler = _SentinelHandler(output)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SentinelHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric_level)
    for name in _CHATTY_LIBRARIES:
        quiet = numeric_level if numeric_level <= logging.DEBUG else logging.WARNING
        logging.getLogger(name).setLevel(max(numeric_level, quiet))


class Throttle:
    """At most one log line per ``interval_seconds`` for a repeating event, with a count.

    ``admit()`` returns ``None`` while the event must stay quiet (it is counted), else how many
    times it happened since the last line, this one included. Thread-safe.

    Args:
        interval_seconds: the shortest time between two lines.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(
        self, interval_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._quiet = 0

    def admit(self) -> int | None:
        """Count one event; return how many to report now, or ``None`` to stay quiet."""
        now = self._clock()
        with self._lock:
            self._quiet += 1
            if now - self._last < self._interval:
                return None
            count, self._quiet, self._last = self._quiet, 0, now
            return count


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False
