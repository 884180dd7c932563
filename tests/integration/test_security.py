"""Security: hostile config values run nothing, host keys are checked (one explicit, loudly
logged switch turns that off), secrets never leak, the exporter listens on loopback by default
and serves TLS with basic auth when configured.

Commands go through real shells: the in-process asyncssh server in ``shell=True`` mode runs
each command with ``/bin/sh -c`` as sshd does, and ``TestOpenSsh`` uses a real OpenSSH sshd
(the login shell). The daemon runs for real, in-process, over SSH with an encrypted client key.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import shlex
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from tests.conftest import require_binary
from tests.support.daemon import free_port, parse_metrics, running_daemon, value
from tests.support.http_client import basic, bcrypt_hash, fetch
from tests.support.journal_writer import JournalWriter, service_line, to_realtime_us
from tests.support.ssh_server import OpenSshServer, SshTestServer
from vllm_sentinel.config import HostConfig, parse_config
from vllm_sentinel.errors import ConfigError, HostKeyError, TransportError
from vllm_sentinel.log import configure_logging
from vllm_sentinel.serve.http import DEFAULT_LISTEN_HOST
from vllm_sentinel.sources.journal import build_journalctl_argv
from vllm_sentinel.sources.transport import SshSettings, SshTransport

HOST = "gpu-node-7"
UNIT = "vllm-kimi-k25.service"
PASSPHRASE = "pass-PHRASE-d41d8cd9-never-log-me"
WRONG_PASSPHRASE = "wrong-PHRASE-0cc175b9-never-log-me"
PASSWORD = "basic-AUTH-92eb5ffe-never-log-me"

# Unit names an attacker would like to see on a remote command line ({m}: a marker file).
HOSTILE_UNITS = [
    "vllm; touch {m}",
    "$(touch {m})",
    "`touch {m}`",
    "vllm\ntouch {m}",
    "vllm.service && touch {m}",
    "vllm.service | tee {m}",
    "'; touch {m}; '",
    '"; touch {m}; "',
    "vllm.service\rtouch {m}",
    "${{IFS}}touch${{IFS}}{m}",
    "vllm.service > {m}",
    "--output=cat; touch {m}",
]


def _toml(text: str) -> str:
    """A TOML basic string holding ``text`` exactly."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\r", "\\r") + '"'


def _remote(**keys: str) -> str:
    """A remote host table with extra ``key = value`` lines (values already TOML)."""
    keys = {"address": '"10.0.0.5"', **keys}
    lines = "".join(f"{key} = {value}\n" for key, value in keys.items())
    return f'[[hosts]]\nname = "r"\n{lines}'


def _recorder(directory: Path) -> tuple[Path, Path]:
    """A script that writes its arguments, NUL-terminated, to a file: (script, output)."""
    output = directory / "argv.bin"
    script = directory / "record-argv"
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {shlex.quote(str(output))}\n")
    script.chmod(0o755)
    return script, output


@contextlib.asynccontextmanager
async def _transport(settings: SshSettings) -> AsyncIterator[SshTransport]:
    transport = SshTransport(HOST, settings)
    try:
        yield transport
    finally:
        await transport.close()


async def _run_hostile_units(transport: SshTransport, tmp_path: Path, journalctl: str) -> None:
    """Send journalctl argvs with hostile units; check each arrives intact and runs nothing."""
    marker = tmp_path / "pwned"
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir(exist_ok=True)
    script, recorded = _recorder(tmp_path)
    units = [template.format(m=marker) for template in HOSTILE_UNITS]
    for unit in [*units, None]:
        chosen = units if unit is None else [unit]
        argv = build_journalctl_argv(chosen, [f"--directory={journal_dir}"], lines=10)
        # 1. the real journalctl gets them: it finds no such unit or refuses the name
        outcome: bytes | TransportError
        try:
            outcome = await transport.run([journalctl, *argv[1:]], timeout=30)
        except TransportError as error:
            outcome = error
        if isinstance(outcome, TransportError):
            assert (outcome.host, outcome.reason) == (HOST, "command_failed")
        else:
            assert outcome == b""
        # 2. a recorder in its place proves the remote shell passed every argument literally
        await transport.run([str(script), *argv[1:]], timeout=30)
        assert recorded.read_bytes().split(b"\0")[:-1] == [arg.encode() for arg in argv[1:]]
    assert not marker.exists()
    # the harness can see an injection: an explicit shell command does create the marker
    await transport.run(["sh", "-c", f"touch {shlex.quote(str(marker))}"], timeout=30)
    assert marker.exists()


class TestConfigValidation:
    """Every config value that reaches a command line refuses shell syntax."""

    @pytest.mark.parametrize("unit", [t.format(m="/tmp/pwned") for t in HOSTILE_UNITS], ids=repr)
    def test_hostile_unit_names_are_refused_with_a_clear_error(self, unit: str) -> None:
        """The error names the key, quotes the value and says what is wrong with it."""
        with pytest.raises(ConfigError) as caught:
            parse_config(_remote(units=f"[{_toml(unit)}]"), source="sentinel.toml")
        message = str(caught.value)
        assert message.startswith("sentinel.toml: 1 invalid key")
        assert f"hosts[0].units[0]: {unit!r} is not a valid systemd unit name or glob: " in message
        assert "is not allowed" in message or "must not start with '-'" in message

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("journalctl_args", '["--directory=/var/log/journal; touch /tmp/pwned"]'),
            ("journalctl_args", '["--directory=$(touch /tmp/pwned)"]'),
            ("journalctl_args", '["--output=cat"]'),
            ("journalctl_args", '["-o", "cat"]'),
            ("journalctl_args", '["--file=/x `id`"]'),
            ("address", '"10.0.0.5; touch /tmp/pwned"'),
            ("address", '"-oProxyCommand=touch /tmp/pwned"'),
            ("user", '"root;touch /tmp/pwned"'),
            ("user", '"$(id)"'),
        ],
    )
    def test_other_command_line_values_are_refused(self, key: str, value: str) -> None:
        """journalctl options outside the allow-list, shell syntax in address or user: refused."""
        with pytest.raises(ConfigError, match=rf"hosts\[0\]\.{key}"):
            parse_config(_remote(**{key: value}))


@pytest.mark.integration
class TestRemoteCommandQuoting:
    """Even past validation, hostile unit names stay data on the remote host."""

    @pytest.mark.asyncio
    async def test_hostile_units_through_sh_c_run_nothing(self, tmp_path: Path) -> None:
        """journalctl argvs with hostile units, via /bin/sh -c on the server, create no file."""
        journalctl = require_binary("journalctl")
        async with SshTestServer(tmp_path / "ssh", shell=True) as server:
            async with _transport(server.settings()) as transport:
                await _run_hostile_units(transport, tmp_path, journalctl)
            assert all(child.argv[:2] == ["/bin/sh", "-c"] for child in server.children)

    @pytest.mark.asyncio
    async def test_hostile_units_through_openssh_run_nothing(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """The same through a real sshd and the login shell."""
        journalctl = require_binary("journalctl")
        async with _transport(openssh_server.settings(connect_timeout_seconds=20)) as transport:
            await _run_hostile_units(transport, tmp_path, journalctl)


@pytest.mark.integration
class TestHostKeys:
    """Host keys are verified against known_hosts whatever else is configured."""

    @pytest.mark.asyncio
    async def test_a_host_never_seen_is_refused(self, tmp_path: Path) -> None:
        """An empty known_hosts: HostKeyError naming the host and the file; nothing runs."""
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        async with SshTestServer(tmp_path / "ssh") as server:
            async with _transport(server.settings(known_hosts=str(empty))) as transport:
                with pytest.raises(HostKeyError) as caught:
                    await transport.run(["echo", "never"], timeout=10)
            assert server.children == []
        assert str(caught.value).startswith(f"{HOST}: ")
        assert f"127.0.0.1:{server.port}" in str(caught.value) and str(empty) in str(caught.value)

    @pytest.mark.asyncio
    async def test_a_missing_known_hosts_file_fails_closed(self, tmp_path: Path) -> None:
        """A known_hosts path that does not exist refuses the connection, naming the host."""
        async with SshTestServer(tmp_path / "ssh") as server:
            settings = server.settings(known_hosts=str(tmp_path / "no-such-file"))
            async with _transport(settings) as transport:
                with pytest.raises(TransportError) as caught:
                    await transport.run(["echo", "never"], timeout=10)
            assert server.children == []
        assert caught.value.host == HOST

    @pytest.mark.asyncio
    async def test_no_other_setting_turns_verification_off(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every other SSH option changed, known_hosts unset, no ~/.ssh: a spoofed key is refused."""
        monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ssh/known_hosts, no config
        async with SshTestServer(tmp_path / "ssh", present_unknown_host_key=True) as server:
            for known_hosts in (str(server.known_hosts_path), None):
                settings = server.settings(
                    known_hosts=known_hosts,
                    user="root",
                    connect_timeout_seconds=5.0,
                    keepalive_interval_seconds=0.0,
                    keepalive_count_max=100,
                    passphrase=PASSPHRASE,
                )
                async with _transport(settings) as transport:
                    with pytest.raises(TransportError) as caught:
                        await transport.run(["echo", "never"], timeout=10)
                assert caught.value.host == HOST
            assert server.children == []

    def test_the_insecure_switch_is_the_only_host_key_setting(self) -> None:
        """Only known_hosts and insecure_accept_any_host_key touch host keys, in config and transport."""
        pattern = ("host_key", "hostkey", "known", "strict", "verif", "insecure", "trust")
        for names in (HostConfig.model_fields, SshSettings.__dataclass_fields__):
            touching = {name for name in names if any(word in name.lower() for word in pattern)}
            assert touching == {"known_hosts", "insecure_accept_any_host_key"}
        config = parse_config(_remote(known_hosts='"/etc/ssh/ssh_known_hosts"'))
        settings = config.hosts[0].ssh_settings()
        assert settings is not None and not settings.insecure_accept_any_host_key
        assert settings.known_hosts == "/etc/ssh/ssh_known_hosts"

    @pytest.mark.asyncio
    async def test_the_insecure_switch_works_and_is_logged_loudly(self, tmp_path: Path) -> None:
        """insecure_accept_any_host_key: a config warning, then a warning log naming the host."""
        config = parse_config(_remote(known_hosts='""', insecure_accept_any_host_key="true"))
        assert any(line.startswith("INSECURE: hosts[0] (r)") for line in config.warnings)
        async with SshTestServer(tmp_path / "ssh", present_unknown_host_key=True) as server:
            settings = server.settings(known_hosts=None, insecure_accept_any_host_key=True)
            with capture_logs() as logs:
                async with _transport(settings) as transport:
                    assert await transport.run(["echo", "lab"], timeout=10) == b"lab\n"
        (entry,) = [e for e in logs if e["event"] == "ssh_host_key_check_disabled"]
        assert entry["log_level"] == "warning" and entry["host"] == HOST


def _encrypted_key(source: Path, target: Path, passphrase: str) -> Path:
    key = asyncssh.read_private_key(str(source))
    key.write_private_key(str(target), passphrase=passphrase)
    target.chmod(0o600)
    return target


@contextlib.contextmanager
def _captured_logging() -> Iterator[io.StringIO]:
    """Route the daemon's structlog and stdlib logs (asyncssh included) to a buffer, at debug."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buffer = io.StringIO()
    configure_logging("json", "debug", stream=buffer)
    try:
        yield buffer
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        structlog.reset_defaults()


def _get(
    url: str,
    password: str | None,
    context: ssl.SSLContext | None = None,
    user: str = "prometheus",
) -> tuple[int, bytes]:
    """GET as ``user`` (over HTTPS verifying with ``context``); HTTP errors are returned, not
    raised."""
    reply = fetch(
        url, context=context, headers=basic(user, password) if password is not None else None
    )
    return reply.status, reply.body


@pytest.mark.integration
class TestSecrets:
    """No key passphrase or basic-auth password in logs, /status or /metrics."""

    @pytest.mark.asyncio
    async def test_daemon_with_passphrase_and_basic_auth_leaks_nothing(
        self, tmp_path: Path, journal_writer: JournalWriter
    ) -> None:
        """A daemon using an encrypted key over SSH and basic auth: secrets appear nowhere."""
        at = to_realtime_us(datetime.now(UTC))
        journal_writer.write_readable([service_line(UNIT, "1" * 32, 4242, "hello", at)])
        journal = journal_writer.path.parent
        web = tmp_path / "web.yml"
        hashed = bcrypt_hash(PASSWORD)
        web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        async with SshTestServer(tmp_path / "ssh", shell=True) as server:
            key = _encrypted_key(server.client_key_path, tmp_path / "id_enc", PASSPHRASE)
            port = free_port()
            config = parse_config(
                f"""
[exporter]
listen = "127.0.0.1:{port}"
web_config_file = "{web}"
[defaults]
state_directory = "{tmp_path / "state"}"
"""
                + "".join(
                    f"""
[[hosts]]
name = "{name}"
address = "127.0.0.1"
port = {server.port}
known_hosts = "{server.known_hosts_path}"
client_keys = ["{key}"]
passphrase = "{phrase}"
units = ["{UNIT}"]
journalctl_args = ["--directory={journal}"]
gpu = "none"
"""
                    for name, phrase in (("gpu-a", PASSPHRASE), ("gpu-b", WRONG_PASSPHRASE))
                )
            )
            with _captured_logging() as logs:
                async with running_daemon(config) as daemon:
                    url = daemon.url
                    assert (await asyncio.to_thread(_get, url + "/status", None))[0] == 401
                    metrics = await _wait_for_metrics(url, "gpu-a", "gpu-b")
                    status_code, status = await asyncio.to_thread(_get, url + "/status", PASSWORD)
                    assert status_code == 200
                logged = logs.getvalue()
        assert any(child.argv[-1].startswith("journalctl") for child in server.children)
        assert '"***"' in status.decode()  # the passphrases are there, redacted
        assert "ssh_host_key_check_disabled" not in logged
        assert "basic_auth_without_tls" in logged  # the one warning this config deserves
        assert "client key unusable: Incorrect passphrase" in logged  # gpu-b, named clearly
        for secret in (PASSPHRASE, WRONG_PASSPHRASE, PASSWORD, hashed):
            for where, text in (
                ("logs", logged),
                ("/status", status.decode()),
                ("/metrics", metrics),
            ):
                assert secret not in text, f"{secret!r} found in {where}"


async def _wait_for_metrics(url: str, up_host: str, down_host: str) -> str:
    """Poll (with the password) until one host's journal is up and the other failed to log in.

    Returns the last /metrics text.
    """
    deadline = time.monotonic() + 30
    text, reasons = "", {}
    while time.monotonic() < deadline:
        code, body = await asyncio.to_thread(_get, url + "/metrics", PASSWORD)
        assert code == 200
        text = body.decode()
        up = value(
            parse_metrics(text), "vllm_sentinel_collector_up", host=up_host, collector="journal"
        )
        code, body = await asyncio.to_thread(_get, url + "/status", PASSWORD)
        assert code == 200
        reasons = {
            host["host"]: host["collectors"].get("journal", {}).get("reason")
            for host in orjson.loads(body)["hosts"]
        }
        if up == 1 and reasons.get(down_host) == "ssh_auth_failed":
            return text
        await asyncio.sleep(0.05)  # poll interval, bounded by the deadline
    raise AssertionError(f"collectors never settled: {reasons}")


def _status_cli(url: str, *args: str, password: str | None) -> subprocess.CompletedProcess[str]:
    """``vllm-sentinel status --url URL ARGS…`` with the password in the environment only."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SENTINEL_PASSWORD"}
    if password is not None:
        env["VLLM_SENTINEL_PASSWORD"] = password
    return subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", "status", "--url", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.integration
class TestTlsAndBasicAuth:
    """The real daemon configured with a web config (TLS + bcrypt users), read by real clients."""

    @pytest.mark.asyncio
    async def test_daemon_serves_https_with_basic_auth_and_status_reads_it(
        self, tmp_path: Path, journal_writer: JournalWriter, tls_files: tuple[Path, Path]
    ) -> None:
        """/metrics: 401 without or with wrong credentials, 200 with them, over verified TLS;
        plain HTTP gets no answer; ``status --cacert --user`` prints the unit."""
        at = to_realtime_us(datetime.now(UTC))
        journal_writer.write_readable([service_line(UNIT, "1" * 32, 4242, "hello", at)])
        cert_file, key_file = tls_files
        hashed = bcrypt_hash(PASSWORD)
        web = tmp_path / "web.yml"
        web.write_text(  # relative file names: relative to the web config
            f"tls_server_config:\n  cert_file: {cert_file.name}\n  key_file: {key_file.name}\n"
            f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        )
        port = free_port()
        config = parse_config(f"""
[exporter]
listen = "127.0.0.1:{port}"
web_config_file = "{web}"
[defaults]
state_directory = "{tmp_path / "state"}"
[[hosts]]
name = "{HOST}"
local = true
units = ["{UNIT}"]
journalctl_args = ["--directory={journal_writer.path.parent}"]
gpu = "none"
""")
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=str(cert_file))
        async with running_daemon(config):
            assert (await asyncio.to_thread(_get, url + "/metrics", None, trusted))[0] == 401
            wrong = await asyncio.to_thread(_get, url + "/metrics", "wrong", trusted)
            assert wrong[0] == 401
            deadline = time.monotonic() + 30
            journal_up = None
            while journal_up != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # poll interval, bounded by the deadline
                code, body = await asyncio.to_thread(_get, url + "/metrics", PASSWORD, trusted)
                assert code == 200
                samples = parse_metrics(body.decode())
                journal_up = value(
                    samples, "vllm_sentinel_collector_up", host=HOST, collector="journal"
                )
            assert journal_up == 1
            with pytest.raises((urllib.error.URLError, ConnectionError)):  # TLS port, plain HTTP
                await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics", PASSWORD)
            ok = await asyncio.to_thread(
                _status_cli, url, "--cacert", str(cert_file), "--user", "prometheus",
                password=PASSWORD,
            )  # fmt: skip
            unauthorized = await asyncio.to_thread(
                _status_cli, url, "--cacert", str(cert_file), password=None
            )
            untrusted = await asyncio.to_thread(
                _status_cli, url, "--user", "prometheus", password=PASSWORD
            )
        assert ok.returncode == 0, ok.stderr
        assert HOST in ok.stdout and UNIT in ok.stdout
        assert unauthorized.returncode == 2 and "401" in unauthorized.stderr
        assert untrusted.returncode == 2 and "certificate verification failed" in untrusted.stderr
        for result in (ok, unauthorized, untrusted):
            assert PASSWORD not in result.stdout + result.stderr


class TestDefaultListenAddress:
    """The exporter binds loopback unless told otherwise."""

    def test_defaults_are_loopback(self) -> None:
        """No [exporter] table, or one without listen: 127.0.0.1:9842; the HTTP default too."""
        for text in ("", "[exporter]\n"):
            exporter = parse_config(text).exporter
            assert (exporter.listen_host, exporter.listen_port) == ("127.0.0.1", 9842)
        assert DEFAULT_LISTEN_HOST == "127.0.0.1"

    @pytest.mark.integration
    @pytest.mark.asyncio
    async def test_a_daemon_without_listen_serves_loopback_only(self, tmp_path: Path) -> None:
        """Started without a listen key, the daemon's socket is bound to 127.0.0.1 only."""
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", 9842)) == 0:
                pytest.skip("127.0.0.1:9842 is in use here")
        config = parse_config(f"""
[defaults]
state_directory = "{tmp_path / "state"}"
[[hosts]]
name = "local"
local = true
units = ["vllm-*.service"]
journalctl_args = ["--directory={tmp_path}"]
gpu = "none"
""")
        async with running_daemon(config) as daemon:
            assert daemon.daemon.http is not None
            assert (daemon.daemon.http.host, daemon.daemon.http.port) == ("127.0.0.1", 9842)
            assert (await daemon.get("/healthz")).strip() == b"ok"
            for address in _non_loopback_addresses():
                with socket.socket() as probe:
                    probe.settimeout(2)
                    assert probe.connect_ex((address, 9842)) != 0, address


def _non_loopback_addresses() -> list[str]:
    """This machine's IPv4 addresses other than 127.x (may be empty in a sandbox)."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a source address
        found.add(probe.getsockname()[0])
    return sorted(address for address in found if not address.startswith("127."))
