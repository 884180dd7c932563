"""``vllm-sentinel init-config`` against the real tools: journal files, known_hosts, sshd.

The journal is a directory of real journal files (``systemd-journal-remote``), passed with
``--journalctl-arg=--directory=DIR`` as a journal-remote collector host would; systemd as
PID 1 is not here, so ``systemctl list-units`` fails and is named in a comment (the booted
root of ``test_install.py`` covers it). Host keys are checked by asyncssh against real
known_hosts files (plain, ``[host]:port``, hashed by ``ssh-keygen -H``) and fetched from a
real OpenSSH sshd with ``--keyscan``.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncssh
import pytest

from tests.conftest import require_binary
from tests.support.journal_writer import JournalWriter, service_line, to_realtime_us
from tests.support.ssh_server import OpenSshServer
from vllm_sentinel.config import load_config
from vllm_sentinel.init_config import (
    InitConfigError,
    SshTarget,
    check_known_host,
    discover_units,
    keyscan,
)

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "vllm_sentinel"]


def _init_config(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return subprocess.run(
        [*CLI, "init-config", *args], capture_output=True, timeout=120, check=False, env=env
    )


def _write_units(writer: JournalWriter, days_ago: float = 0.0) -> None:
    """vllm-qwen (named vllm*, no banner), serve-llama (banner only), units that are not vLLM
    (one is the sentinel's own, vllm-sentinel.service)."""
    start = datetime.now(UTC) - timedelta(days=days_ago, minutes=10)

    def at(seconds: int) -> int:
        return to_realtime_us(start + timedelta(seconds=seconds))

    writer.write_and_flush(
        [
            service_line("vllm-qwen.service", "a" * 32, 100, "INFO 12-01 10:00:00 [loader.py:1] loading", at(0)),
            service_line(
                "serve-llama.service", "b" * 32, 200,
                "INFO 12-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5", at(1),
            ),
            service_line(
                "engine-only.service", "c" * 32, 300,
                "INFO 12-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.10.1) with "
                "config: model='Qwen/Qwen3-8B', speculative_config=None", at(2),
            ),
            service_line("nginx.service", "d" * 32, 400, "vLLM is great, says the proxy", at(3)),
            # the sentinel's own unit matches vllm*, and is no vLLM server
            service_line("vllm-sentinel.service", "e" * 32, 500, "journal_units_changed", at(4)),
        ]
    )  # fmt: skip
    writer.wait_until_readable(5)


class TestDiscoverUnits:
    def test_finds_vllm_named_units_and_banners_in_the_journal(
        self, journal_writer: JournalWriter
    ) -> None:
        """vllm* names from the unit field (never the sentinel's own); other names only when
        they logged a vLLM banner."""
        _write_units(journal_writer)
        units, notes = discover_units(
            journalctl_args=[f"--directory={journal_writer.path.parent}"], now=datetime.now(UTC)
        )
        assert [(unit.name, unit.sources) for unit in units] == [
            ("engine-only.service", ("vLLM banner",)),
            ("serve-llama.service", ("vLLM banner",)),
            ("vllm-qwen.service", ("journal",)),
        ]
        assert not [note for note in notes if note.startswith("journal")], notes

    def test_the_banner_search_is_bounded_to_a_week(self, journal_writer: JournalWriter) -> None:
        """A banner older than BANNER_WINDOW_SECONDS is not searched (grep reads every entry)."""
        _write_units(journal_writer, days_ago=8)
        units, _notes = discover_units(
            journalctl_args=[f"--directory={journal_writer.path.parent}"], now=datetime.now(UTC)
        )
        assert [unit.name for unit in units] == ["vllm-qwen.service"]

    def test_a_journal_that_cannot_be_read_is_a_note(self, tmp_path: Path) -> None:
        """journalctl failing (here: a --file that does not exist) is said, not raised."""
        require_binary("journalctl")
        units, notes = discover_units(
            journalctl_args=[f"--file={tmp_path / 'absent.journal'}"], now=datetime.now(UTC)
        )
        assert units == ()
        assert [note for note in notes if note.startswith("journal: journalctl failed (")]


def _known_hosts(server: OpenSshServer) -> str:
    return server.known_hosts_path.read_text(encoding="utf-8")


class TestKnownHosts:
    def test_a_key_for_host_and_port_is_found(self, openssh_server: OpenSshServer) -> None:
        """[127.0.0.1]:PORT in the file: accepted, as the daemon's connection would."""
        target = SshTarget("gpu-7", "127.0.0.1", openssh_server.port)
        assert check_known_host(target, str(openssh_server.known_hosts_path)) == 1

    def test_hashed_entries_match(self, openssh_server: OpenSshServer, tmp_path: Path) -> None:
        """A file hashed by ssh-keygen -H (HashKnownHosts) still matches."""
        hashed = tmp_path / "known_hosts"
        hashed.write_text(_known_hosts(openssh_server), encoding="utf-8")
        subprocess.run(
            [require_binary("ssh-keygen"), "-H", "-f", str(hashed)], check=True, capture_output=True
        )
        assert "127.0.0.1" not in hashed.read_text(encoding="utf-8")
        assert check_known_host(SshTarget("g", "127.0.0.1", openssh_server.port), str(hashed)) == 1

    def test_no_key_for_the_host_is_refused(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """Another port, another host, an empty or missing file: refused, naming what to run."""
        path = str(openssh_server.known_hosts_path)
        with pytest.raises(InitConfigError) as caught:
            check_known_host(SshTarget("gpu-7", "127.0.0.1", 2), path)
        assert str(caught.value) == (
            f"gpu-7: no host key for [127.0.0.1]:2 in {path}: add it after checking its "
            f"fingerprint (ssh-keyscan -p 2 127.0.0.1 >> {path}), or pass --keyscan to fetch it"
        )
        with pytest.raises(InitConfigError, match=re.escape("no host key for 127.0.0.2 in")):
            check_known_host(SshTarget("b", "127.0.0.2"), path)
        with pytest.raises(InitConfigError, match=r"cannot read known_hosts .*: no such file"):
            check_known_host(SshTarget("b", "127.0.0.1"), str(tmp_path / "absent"))

    def test_a_revoked_key_does_not_count(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """@revoked entries for the host's key leave it untrusted."""
        line = _known_hosts(openssh_server).strip()
        revoked = tmp_path / "known_hosts"
        revoked.write_text(f"{line}\n@revoked {line}\n", encoding="utf-8")
        with pytest.raises(InitConfigError, match="no host key"):
            check_known_host(SshTarget("g", "127.0.0.1", openssh_server.port), str(revoked))

    def test_keyscan_fetches_and_appends_the_key(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """ssh-keyscan's keys are appended, their fingerprints returned, and then they match."""
        require_binary("ssh-keyscan")
        path = tmp_path / "known_hosts"
        target = SshTarget("gpu-7", "127.0.0.1", openssh_server.port)
        fingerprints = keyscan(target, str(path))
        expected = asyncssh.read_known_hosts(str(openssh_server.known_hosts_path)).match(
            "127.0.0.1", "127.0.0.1", openssh_server.port
        )[0][0]
        assert fingerprints == [f"{expected.get_fingerprint('sha256')} ssh-ed25519"]
        assert check_known_host(target, str(path)) == 1

    def test_keyscan_of_a_closed_port_fails(self, tmp_path: Path) -> None:
        """No sshd there: one error, nothing written."""
        require_binary("ssh-keyscan")
        path = tmp_path / "known_hosts"
        with pytest.raises(InitConfigError, match="ssh-keyscan found no host key"):
            keyscan(SshTarget("x", "127.0.0.1", 1), str(path))
        assert not path.exists()


class TestCommand:
    def test_writes_a_config_that_check_config_accepts(
        self, journal_writer: JournalWriter, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """Local units from the journal, an SSH host with its key; mode 0640; check-config OK."""
        _write_units(journal_writer)
        output = tmp_path / "config.toml"
        result = _init_config(
            f"--journalctl-arg=--directory={journal_writer.path.parent}",
            "--ssh", f"sentinel@127.0.0.1:{openssh_server.port}",
            "--known-hosts", str(openssh_server.known_hosts_path),
            "--client-key", str(openssh_server.client_key_path),
            "--output", str(output),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        assert result.stderr.decode() == (
            f"wrote {output}; check it with: vllm-sentinel check-config {output}\n"
        )
        assert stat.S_IMODE(output.stat().st_mode) == 0o640
        config = load_config(output)
        local, remote = config.hosts
        assert local.units == ("vllm*.service", "engine-only.service", "serve-llama.service")
        assert local.journalctl_args == (f"--directory={journal_writer.path.parent}",)
        assert (remote.address, remote.port, remote.user) == (
            "127.0.0.1",
            openssh_server.port,
            "sentinel",
        )
        check = subprocess.run(
            [*CLI, "check-config", str(output)], capture_output=True, check=False
        )
        assert check.returncode == 0, check.stderr.decode()
        assert check.stdout.decode().splitlines()[0] == f"{output}: OK"

    def test_an_unknown_host_key_is_one_line_and_exit_2(
        self, openssh_server: OpenSshServer, tmp_path: Path
    ) -> None:
        """Without the key and without --keyscan: nothing written, the reason on stderr."""
        empty = tmp_path / "known_hosts"
        empty.write_text("", encoding="utf-8")
        output = tmp_path / "config.toml"
        result = _init_config(
            "--ssh", f"127.0.0.1:{openssh_server.port}", "--known-hosts", str(empty),
            "--no-local", "--output", str(output),
        )  # fmt: skip
        assert result.returncode == 2
        (line,) = result.stderr.decode().splitlines()
        assert line.startswith(
            f"vllm-sentinel: init-config: 127.0.0.1: no host key for [127.0.0.1]:{openssh_server.port} in "
        )
        assert not output.exists()

    def test_keyscan_when_asked(self, openssh_server: OpenSshServer, tmp_path: Path) -> None:
        """--keyscan adds the key, prints its fingerprint, and the config follows."""
        known = tmp_path / "known_hosts"
        result = _init_config(
            "--ssh", f"127.0.0.1:{openssh_server.port}", "--known-hosts", str(known),
            "--keyscan", "--no-local",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        (line,) = result.stderr.decode().splitlines()
        assert line.startswith("127.0.0.1: added host key SHA256:") and line.endswith(
            " ssh-ed25519"
        )
        assert f"[127.0.0.1]:{openssh_server.port} ssh-ed25519 " in known.read_text()
        assert 'address = "127.0.0.1"' in result.stdout.decode()

    def test_an_existing_output_is_kept_unless_forced(self, tmp_path: Path) -> None:
        """--output never overwrites silently; --force does."""
        require_binary("journalctl")
        output = tmp_path / "config.toml"
        output.write_text("# mine\n", encoding="utf-8")
        refused = _init_config("--output", str(output))
        assert refused.returncode == 2
        assert refused.stderr.decode() == (
            f"vllm-sentinel: init-config: {output} exists (--force overwrites it)\n"
        )
        assert output.read_text() == "# mine\n"
        forced = _init_config("--output", str(output), "--force")
        assert forced.returncode == 0, forced.stderr.decode()
        assert load_config(output).hosts[0].local

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--no-local"], "--no-local needs at least one --ssh host"),
            (["--ssh", "a b"], "--ssh 'a b': expected [USER@]HOST[:PORT]"),
            (["--listen", "nowhere"], "'nowhere': expected host:port"),
        ],
    )
    def test_bad_options_are_one_line(self, args: list[str], message: str) -> None:
        """Usage errors: one line, exit 2."""
        result = _init_config(*args)
        assert result.returncode == 2
        (line,) = result.stderr.decode().splitlines()
        assert message in line
