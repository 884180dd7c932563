"""Exceptions raised by vllm-sentinel.

Core modules never raise on bad *input* (they count and skip it); these exceptions are for bad
*configuration* and for failures at the edges::

    SentinelError
    ├── ConfigError          a config file or command-line value is invalid
    ├── InputError           a replay input cannot be read at all (missing file, directory)
    ├── StateDirectoryError  the state directory cannot be written (the daemon does not start)
    ├── TransportError       running a command locally or over SSH failed
    │   └── HostKeyError     an SSH host key is unknown or changed
    └── GpuCollectorError    NVML or nvidia-smi cannot report GPU memory
"""

__all__ = [
    "ConfigError",
    "GpuCollectorError",
    "HostKeyError",
    "InputError",
    "SentinelError",
    "StateDirectoryError",
    "TransportError",
]


class SentinelError(Exception):
    """Base class of every error vllm-sentinel raises on purpose."""


class ConfigError(SentinelError):
    """A configuration value is invalid; the message names every bad key with its path."""


class InputError(SentinelError):
    """A replay input cannot be opened or read."""


class StateDirectoryError(SentinelError):
    """The state directory (cursors and counters) cannot be created or written.

    ``StateDirectoryError.unwritable(directory, reason)`` words it as ``run`` and
    ``check-config`` both say it.
    """

    @classmethod
    def unwritable(cls, directory: object, reason: str) -> "StateDirectoryError":
        """The error for ``directory`` that cannot be written, ``reason`` in words."""
        return cls(
            f"state directory {directory}: cannot write there: {reason} (set "
            "defaults.state_directory to a writable directory)"
        )


class TransportError(SentinelError):
    """Running a command on a host failed (spawn error, SSH connection lost, timeout)."""

    def __init__(self, host: str, reason: str, detail: str = "") -> None:
        self.host = host
        self.reason = reason
        self.detail = detail
        super().__init__(f"{host}: {reason}" + (f": {detail}" if detail else ""))


class HostKeyError(TransportError):
    """The SSH server's host key is not in known_hosts, or differs from the one there."""


class GpuCollectorError(SentinelError):
    """GPU memory cannot be read; ``reason`` is a short, bounded label for metrics and logs."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)
