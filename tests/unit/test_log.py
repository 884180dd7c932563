"""Tests for ``vllm_sentinel.log``: JSON and console output, stdlib routing, secret redaction."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from vllm_sentinel.config import parse_config
from vllm_sentinel.errors import ConfigError
from vllm_sentinel.log import configure_logging, is_secret_key, redact_secrets

SECRET = "correct-horse-battery-staple"


@pytest.fixture(autouse=True)
def _restore_stdlib_logging() -> Iterator[None]:
    """configure_logging touches the stdlib root logger: put it back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    asyncssh_level = logging.getLogger("asyncssh").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("asyncssh").setLevel(asyncssh_level)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """Parse every line written to ``stream`` as JSON."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


class TestJsonFormat:
    def test_event_fields(self) -> None:
        """A JSON line has event, level, logger, UTC ISO timestamp and the context keys."""
        stream = io.StringIO()
        configure_logging("json", "info", stream=stream)
        structlog.get_logger("vllm_sentinel.cli").info("config_loaded", hosts=2)
        (line,) = json_lines(stream)
        assert line["event"] == "config_loaded"
        assert line["level"] == "info"
        assert line["logger"] == "vllm_sentinel.cli"
        assert line["hosts"] == 2
        stamp = datetime.fromisoformat(line["timestamp"])
        assert stamp.utcoffset() == UTC.utcoffset(None)
        assert line["timestamp"].endswith("Z")

    def test_stdlib_records_are_routed(self) -> None:
        """Records of stdlib loggers (libraries) come out as the same JSON."""
        stream = io.StringIO()
        configure_logging("json", "info", stream=stream)
        logging.getLogger("asyncio").warning("task %s failed", "t1")
        (line,) = json_lines(stream)
        assert line["event"] == "task t1 failed"
        assert line["level"] == "warning"
        assert line["logger"] == "asyncio"
        assert "timestamp" in line

    def test_level_filters(self) -> None:
        """Events below the level are dropped, for structlog and stdlib alike."""
        stream = io.StringIO()
        configure_logging("json", "WARNING", stream=stream)
        structlog.get_logger("x").info("cursor_saved")
        logging.getLogger("y").info("dropped")
        structlog.get_logger("x").warning("ssh_connection_lost", host="h")
        assert [line["event"] for line in json_lines(stream)] == ["ssh_connection_lost"]

    def test_exception_is_rendered(self) -> None:
        """A logged exception carries its traceback in the line."""
        stream = io.StringIO()
        configure_logging("json", "info", stream=stream)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            structlog.get_logger("x").exception("host_task_failed", host="h")
        (line,) = json_lines(stream)
        assert line["level"] == "error"
        assert "RuntimeError: boom" in line["exception"]

    def test_asyncssh_info_is_quieted(self) -> None:
        """asyncssh's per-connection INFO chatter is hidden unless debugging."""
        stream = io.StringIO()
        configure_logging("json", "info", stream=stream)
        logging.getLogger("asyncssh").info("Opening SSH connection")
        assert stream.getvalue() == ""
        configure_logging("json", "debug", stream=stream)
        logging.getLogger("asyncssh").info("Opening SSH connection")
        assert len(json_lines(stream)) == 1

    def test_reconfiguring_replaces_the_handler(self) -> None:
        """Calling configure_logging twice does not duplicate lines."""
        first, second = io.StringIO(), io.StringIO()
        configure_logging("json", "info", stream=first)
        configure_logging("json", "info", stream=second)
        structlog.get_logger("x").info("daemon_started")
        logging.getLogger("z").warning("once")
        assert first.getvalue() == ""
        assert [line["event"] for line in json_lines(second)] == ["daemon_started", "once"]


class TestConsoleFormat:
    def test_console_line(self) -> None:
        """The console format shows the timestamp, level, event, logger and context."""
        stream = io.StringIO()
        configure_logging("console", "debug", stream=stream)
        structlog.get_logger("vllm_sentinel.monitor").debug("snapshot_published", units=3)
        text = stream.getvalue()
        assert "snapshot_published" in text
        assert "debug" in text
        assert "vllm_sentinel.monitor" in text
        assert "units=3" in text
        assert "\x1b[" not in text  # no colours when not writing to a terminal


class TestArguments:
    def test_unknown_level_rejected(self) -> None:
        """An unknown level is a ConfigError naming the choices."""
        with pytest.raises(ConfigError, match="log level 'loud' is not one of: debug, info"):
            configure_logging("json", "loud")

    def test_unknown_format_rejected(self) -> None:
        """An unknown format is a ConfigError."""
        with pytest.raises(ConfigError, match="log format 'xml' is not one of: console, json"):
            configure_logging("xml", "info")  # type: ignore[arg-type]


class TestRedaction:
    @pytest.mark.parametrize(
        "key",
        [
            "passphrase",
            "ssh_passphrase",
            "password",
            "Password",
            "db_passwd",
            "secret",
            "client_secret",
            "token",
            "api_token",
            "accessToken",
            "api_key",
            "authorization",
        ],
    )
    def test_secret_keys_recognised(self, key: str) -> None:
        """Keys named like secrets are recognised, in any case."""
        assert is_secret_key(key)

    @pytest.mark.parametrize(
        "key", ["tokenizer", "max_tokens", "host", "unit", "known_hosts", "reason"]
    )
    def test_ordinary_keys_kept(self, key: str) -> None:
        """Keys that merely contain 'token' as part of a word are not redacted."""
        assert not is_secret_key(key)

    def test_processor_redacts_nested_values(self) -> None:
        """The processor replaces secret values at any depth and keeps the rest."""
        event = {
            "event": "config_loaded",
            "passphrase": SECRET,
            "settings": {"hosts": [{"name": "a", "password": SECRET}], "token": SECRET},
        }
        out = redact_secrets(None, "info", event)
        assert out == {
            "event": "config_loaded",
            "passphrase": "***",
            "settings": {"hosts": [{"name": "a", "password": "***"}], "token": "***"},
        }

    @pytest.mark.parametrize("log_format", ["json", "console"])
    def test_secret_never_reaches_output(self, log_format: str) -> None:
        """A passphrase logged as a key, nested, or via a config object never appears."""
        stream = io.StringIO()
        configure_logging(log_format, "debug", stream=stream)  # type: ignore[arg-type]
        config = parse_config(
            f'[[hosts]]\nname = "r"\naddress = "10.0.0.5"\npassphrase = "{SECRET}"\n'
        )
        log = structlog.get_logger("vllm_sentinel.daemon")
        log.info("config_loaded", passphrase=SECRET, config=config.redacted())
        log.info("ssh_connection_opened", settings=config.hosts[0].ssh_settings())
        log.info("host_configured", host=config.hosts[0])
        logging.getLogger("asyncssh").warning("auth", extra={"password": SECRET})
        text = stream.getvalue()
        assert "config_loaded" in text
        assert "***" in text
        assert SECRET not in text

    def test_json_line_shows_redacted_marker(self) -> None:
        """In JSON the secret key stays, with *** as its value."""
        stream = io.StringIO()
        configure_logging("json", "info", stream=stream)
        structlog.get_logger("x").info("ssh_key_loaded", host="r", passphrase=SECRET)
        (line,) = json_lines(stream)
        assert line["passphrase"] == "***"
        assert line["host"] == "r"
