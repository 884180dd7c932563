"""The command line as a user runs it: replay, check-config, demo, status."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.daemon import current_phase, free_port, parse_metrics, scrape, value
from tests.support.http_client import bcrypt_hash, fetch
from tests.support.snapshots import basic_snapshot
from tests.support.tls import write_self_signed
from vllm_sentinel.engine.report import status_document
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import (
    BasicAuthenticator,
    TlsServerConfig,
    build_ssl_context,
    make_app,
    start_http_server,
)

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "vllm_sentinel"]
LOG = ROOT / "tests/golden/logs/101-journald-v0.15.1-boot-kv-too-small-restart-then-ready.log"


def _run(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, timeout=60, check=False, env=env
    )


class TestReplay:
    """``vllm-sentinel replay``."""

    def test_text_timeline_and_verdict(self) -> None:
        """A journald paste prints three incarnations and the KV-cache root cause."""
        result = _run("replay", str(LOG))
        assert result.returncode == 0
        out = result.stdout.decode()
        assert out.count("  incarnation ") == 3
        assert "root cause kv_cache_insufficient: ValueError: To serve at least one request" in out
        assert out.rstrip().endswith("verdict: ready (the log ends here)")

    def test_json_from_stdin(self) -> None:
        """``-`` reads stdin; ``--output json`` prints the documented document."""
        result = _run(
            "replay",
            "--output",
            "json",
            "--unit",
            "vllm-assistant.service",
            "-",
            stdin=LOG.read_bytes(),
        )
        assert result.returncode == 0
        (unit,) = json.loads(result.stdout)["units"]
        assert unit["unit"] == "vllm-assistant.service"
        assert [i["outcome"] for i in unit["incarnations"]] == ["stopped", "crashed", "ready"]
        crash = unit["incarnations"][1]["crash"]
        assert (crash["cause"], crash["exception"]) == ("kv_cache_insufficient", "ValueError")

    def test_json_times_of_a_text_log_name_no_zone_and_no_future(self) -> None:
        """A vLLM header stamp (no year, no zone) dated two days after today: the JSON gives
        it last year, the latest that is not in the future, and writes it without a ``Z``."""
        ahead = datetime.now(UTC) + timedelta(days=2)
        if (ahead.month, ahead.day) == (2, 29):
            ahead += timedelta(days=1)  # no 29 February last year
        stamp = ahead.strftime("%m-%d 12:00:00")
        log = f"INFO {stamp} [api_server.py:1] vLLM API server version 0.11.0\n".encode()
        result = _run("replay", "--output", "json", "-", stdin=log)
        assert result.returncode == 0, result.stderr
        (unit,) = json.loads(result.stdout)["units"]
        assert unit["log_times_local"] is True
        year = ahead.year - 1  # this year's would be ahead (across New Year: this year's)
        assert unit["incarnations"][0]["started_at"] == f"{year}-{stamp.replace(' ', 'T')}"

    def test_several_text_files_stay_apart(self) -> None:
        """Two pasted logs are two units named after their files, never one merged timeline."""
        first = ROOT / "tests/golden/logs/005-v0-0.2-kv-cache-too-small.log"
        second = ROOT / "tests/golden/logs/001-port-in-use-after-startup-docker-compose.log"
        result = _run("replay", "--output", "json", str(first), str(second))
        assert result.returncode == 0
        units = {u["unit"]: u for u in json.loads(result.stdout)["units"]}
        assert set(units) == {first.name, second.name}
        assert units[second.name]["incarnations"][-1]["crash"]["cause"] == "port_in_use"
        assert units[first.name]["incarnations"][-1]["furthest_phase"] == "profiling_kv_cache"

    def test_text_without_vllm_lines_is_not_a_unit(self) -> None:
        """Text with nothing of vLLM's shape reports no unit."""
        result = _run("replay", "-", stdin=b"hello world\nnothing to see\n")
        assert result.returncode == 0
        assert result.stdout.decode().strip() == "no vLLM records found"

    def test_directory_is_named_as_such(self, tmp_path: Path) -> None:
        """A directory is refused as a directory, not as a missing file."""
        result = _run("replay", str(tmp_path))
        assert result.returncode == 2
        assert "is a directory" in result.stderr.decode()

    def test_unreadable_input_exits_2(self, tmp_path: Path) -> None:
        """A missing file is one line on stderr and exit status 2."""
        result = _run("replay", str(tmp_path / "missing.log"))
        assert result.returncode == 2
        assert result.stderr.decode().count("\n") == 1 and "cannot read" in result.stderr.decode()

    def test_named_pipe_is_read_like_a_file(self, tmp_path: Path) -> None:
        """A FIFO (what ``replay <(cat x.log)`` passes) is read to its end, like the file."""
        fifo = tmp_path / "paste.fifo"
        os.mkfifo(fifo)

        def feed() -> None:
            with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as stream:
                # open blocks until replay opens the other end
                for start in range(0, len(data), 4096):
                    stream.write(data[start : start + 4096])

        data = LOG.read_bytes()
        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        result = _run("replay", str(fifo))
        if writer.is_alive():  # replay never opened the pipe: release the writer
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout == _run("replay", str(LOG)).stdout
        assert "root cause kv_cache_insufficient" in result.stdout.decode()

    def test_dev_null_is_empty_input(self) -> None:
        """``/dev/null`` (a character device) is empty input: exit 0, as for empty stdin."""
        result = _run("replay", "/dev/null")
        assert result.returncode == 0, result.stderr.decode()
        assert result.stdout == _run("replay", "-", stdin=b"").stdout
        assert result.stdout.decode().strip() == "no vLLM records found"

    def test_what_open_refuses_is_one_line_with_its_reason(self, tmp_path: Path) -> None:
        """A path that exists but cannot be opened (a UNIX socket) names open()'s reason."""
        path = tmp_path / "control.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(path))
            result = _run("replay", str(path))
        err = result.stderr.decode()
        assert result.returncode == 2
        assert err.count("\n") == 1, err
        assert f"cannot read {path}: " in err and "no such file" not in err, err


class TestCheckConfig:
    """``vllm-sentinel check-config``."""

    def test_example_config_is_valid(self) -> None:
        """The shipped example passes."""
        result = _run("check-config", str(ROOT / "config.example.toml"))
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode().splitlines()[0].endswith(": OK")

    def test_every_bad_key_is_reported(self, tmp_path: Path) -> None:
        """Two mistakes, one error, both paths, exit 2."""
        bad = tmp_path / "bad.toml"
        bad.write_text(
            '[exporter]\nlisten = "nowhere"\n[[hosts]]\nname = "a"\nlocal = true\n'
            'units = ["vllm; touch /tmp/pwned"]\n'
        )
        result = _run("check-config", str(bad))
        assert result.returncode == 2
        err = result.stderr.decode()
        assert "exporter.listen" in err and "hosts[0].units[0]" in err

    @pytest.mark.parametrize(
        ("web_config", "expected"),
        [
            ("basic_auth_users:\n  prometheus: plain-secret-password\n", "not a bcrypt hash"),
            ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  cipher: x\n", "unsupported keys: cipher"),
            ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
             "tls_server_config.cert_file: "),
        ],
        ids=["plain-password", "unknown-key", "missing-key-file"],
    )  # fmt: skip
    def test_the_web_config_is_checked_exactly_as_run_reads_it(
        self, tmp_path: Path, web_config: str, expected: str
    ) -> None:
        """A web config ``run`` refuses is an error of ``check-config`` too, with the same
        message and exit 2; the password itself is never echoed (issue 15 §7: it said OK)."""
        web = tmp_path / "web.yml"
        web.write_text(web_config)
        config = tmp_path / "sentinel.toml"
        config.write_text(
            f'[exporter]\nlisten = "127.0.0.1:{free_port()}"\nweb_config_file = "{web}"\n'
            f'[defaults]\nstate_directory = "{tmp_path / "state"}"\n'
            f'[[hosts]]\nname = "a"\nlocal = true\ngpu = "none"\n'
            f'journalctl_args = ["--directory={tmp_path}"]\n'
        )
        checked = _run("check-config", str(config))
        ran = _run("run", "--config", str(config))
        assert (checked.returncode, ran.returncode) == (2, 2)
        check_error = checked.stderr.decode().strip().splitlines()
        run_error = [
            line for line in ran.stderr.decode().splitlines() if line.startswith("vllm-sentinel:")
        ]
        assert check_error == run_error and len(check_error) == 1
        assert expected in check_error[0] and str(web) in check_error[0]
        assert "plain-secret-password" not in check_error[0]

    @pytest.mark.parametrize(
        ("exporter", "expected"),
        [
            ('tls_cert_file = "{d}/nope.pem"\ntls_key_file = "{d}/nope.key"\n',
             "exporter.tls_cert_file: {d}/nope.pem: no such file or directory"),
            ('tls_cert_file = "{d}/cert.pem"\ntls_key_file = "{d}/nope.key"\n',
             "exporter.tls_key_file: {d}/nope.key: no such file or directory"),
        ],
        ids=["cert-missing", "key-missing"],
    )  # fmt: skip
    def test_a_missing_tls_file_is_named_by_its_key(
        self, tmp_path: Path, tls_files: tuple[Path, Path], exporter: str, expected: str
    ) -> None:
        """A missing certificate or key file is one line naming the config file, the key and
        the file, in words (it said ``tls_server_config: cannot load A / B: [Errno 2] …``)."""
        cert_file, _ = tls_files
        (tmp_path / "cert.pem").write_bytes(cert_file.read_bytes())
        config = tmp_path / "sentinel.toml"
        config.write_text(
            "[exporter]\n" + exporter.format(d=tmp_path)
            + '[[hosts]]\nname = "a"\nlocal = true\n'
        )  # fmt: skip
        err = _one_error_line(_run("check-config", str(config)))
        assert err.strip() == f"vllm-sentinel: {config}: {expected.format(d=tmp_path)}", err

    def test_a_state_directory_no_one_can_write_fails_as_run_does(self, tmp_path: Path) -> None:
        """``run`` refuses a state directory it cannot create or write (exit 2); so does
        check-config, in run's words, when no user could (here: under a file). It said OK."""
        blocker = tmp_path / "file"
        blocker.write_text("")
        config = tmp_path / "sentinel.toml"
        config.write_text(
            f'[defaults]\nstate_directory = "{blocker}/state"\n'
            '[[hosts]]\nname = "a"\nlocal = true\n'
        )
        result = _run("check-config", str(config))
        assert (result.returncode, result.stdout) == (2, b"")
        assert result.stderr.decode() == (
            f"vllm-sentinel: state directory {blocker}/state: cannot write there: not a "
            "directory (set defaults.state_directory to a writable directory)\n"
        )  # run's words (issue 21)

    @pytest.mark.skipif(os.geteuid() != 0, reason="checks as nobody (needs root to switch)")
    def test_permission_denied_to_another_user_is_a_warning(self) -> None:
        """An unprivileged user checking the service's config: a state directory only root
        (the service's user here) may write is a warning, exit 0: the service may be allowed.
        The check runs in a forked child switched to nobody (the venv's interpreter is not
        reachable to nobody, so not a new process)."""
        import tempfile

        from vllm_sentinel.config import check_config

        with tempfile.TemporaryDirectory(prefix="check-config.") as folder:
            os.chmod(folder, 0o755)  # readable by nobody, writable by root only
            config = Path(folder) / "sentinel.toml"
            config.write_text(
                f'[defaults]\nstate_directory = "{folder}/state"\n'
                '[[hosts]]\nname = "a"\nlocal = true\n'
            )
            config.chmod(0o644)
            assert not [line for line in check_config(config) if "state directory" in line]
            reader, writer = os.pipe()
            child = os.fork()
            if child == 0:  # pragma: no cover (the child)
                try:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    os.write(writer, json.dumps(check_config(config)).encode())
                finally:
                    os._exit(0)
            os.close(writer)
            with os.fdopen(reader, "rb") as pipe:
                lines = json.loads(pipe.read() or b"null")
            os.waitpid(child, 0)
        assert lines is not None
        assert lines[-1] == (
            f"warning: state directory {folder}/state: cannot write there: permission denied "
            "(set defaults.state_directory to a writable directory); as this user: the "
            "service's user may be allowed"
        ), lines

    def test_a_directory_is_one_line(self, tmp_path: Path) -> None:
        """``check-config DIR`` is one line and exit 2, as ``replay DIR`` is (it printed
        click's three-line usage error)."""
        err = _one_error_line(_run("check-config", str(tmp_path)))
        assert err.strip() == f"vllm-sentinel: cannot read {tmp_path}: is a directory", err

    def test_a_missing_file_is_one_line(self, tmp_path: Path) -> None:
        """The same words as ``replay``'s for a missing file."""
        missing = tmp_path / "nope.toml"
        err = _one_error_line(_run("check-config", str(missing)))
        assert err.strip() == (
            f"vllm-sentinel: cannot read {missing}: no such file or directory"
        ), err


class TestServeErrors:
    """An address that cannot be bound: one line naming it, a way out, exit 2."""

    @pytest.mark.parametrize("command", ["run", "demo"])
    def test_an_address_in_use(self, tmp_path: Path, command: str) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            where = f"127.0.0.1:{taken.getsockname()[1]}"
            args = [command, "--listen", where]
            if command == "run":
                config = tmp_path / "sentinel.toml"
                config.write_text(
                    f'[defaults]\nstate_directory = "{tmp_path / "state"}"\n'
                    f'[[hosts]]\nname = "a"\nlocal = true\ngpu = "none"\n'
                    f'journalctl_args = ["--directory={tmp_path}"]\n'
                )
                args += ["--config", str(config)]
            result = _run(*args)
        lines = [
            line
            for line in result.stderr.decode().splitlines()
            if line.startswith("vllm-sentinel:")
        ]
        assert result.returncode == 2, result.stderr.decode()
        assert lines == [
            f"vllm-sentinel: cannot serve on {where}: address already in use "
            "(another vllm-sentinel or demo? choose another address with --listen HOST:PORT)"
        ], result.stderr.decode()


PASSWORD = "status-PASSWORD-7c3d-never-in-argv"


@contextlib.contextmanager
def _exporter(tls_files: tuple[Path, Path] | None, users: bool) -> Iterator[str]:
    """A real exporter HTTP server (optional TLS, optional basic auth) on 127.0.0.1: its URL."""
    cert_file, key_file = tls_files or (None, None)
    context = (
        build_ssl_context(TlsServerConfig(cert_file, key_file))
        if cert_file is not None and key_file is not None
        else None
    )
    hashed = bcrypt_hash(PASSWORD)
    authenticator = BasicAuthenticator({"prometheus": hashed}) if users else None
    registry = make_registry(SentinelCollector(basic_snapshot))
    app = make_app(registry, lambda: status_document(basic_snapshot()), authenticator=authenticator)
    handle = start_http_server("127.0.0.1", 0, app, ssl_context=context)
    try:
        yield f"{'https' if context else 'http'}://127.0.0.1:{handle.port}"
    finally:
        handle.shutdown()


def _env(password: str | None = PASSWORD) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SENTINEL_PASSWORD"}
    if password is not None:
        env["VLLM_SENTINEL_PASSWORD"] = password
    return env


def _one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert err.count("\n") == 1 and err.startswith("vllm-sentinel: "), err
    assert "Traceback" not in err and PASSWORD not in err
    return err


class TestStatus:
    """``vllm-sentinel status`` against a real exporter: TLS with a CA file, basic auth."""

    def test_tls_and_basic_auth(self, tls_files: tuple[Path, Path]) -> None:
        """--cacert trusts the server, --user sends the password from the environment."""
        cert_file, _ = tls_files
        with _exporter(tls_files, users=True) as url:
            result = _run(
                "status", "--url", url, "--cacert", str(cert_file), "--user", "prometheus",
                env=_env(),
            )  # fmt: skip
            as_json = _run(
                "status", "--json", "--url", url + "/", "--cacert", str(cert_file),
                "--user", "prometheus", env=_env(),
            )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        assert "vllm-idle.service" in result.stdout.decode()
        assert as_json.returncode == 0, as_json.stderr.decode()
        assert {h["host"] for h in json.loads(as_json.stdout)["hosts"]} == {"gpu-a", "gpu-b"}

    def test_missing_or_wrong_password_is_401_in_one_line(self) -> None:
        """401 without credentials and with a wrong password: one line each, exit 2."""
        with _exporter(None, users=True) as url:
            missing = _one_error_line(_run("status", "--url", url, env=_env()))
            wrong = _one_error_line(
                _run("status", "--url", url, "--user", "prometheus", env=_env("wrong"))
            )
        assert "401" in missing and "--user" in missing
        assert "401" in wrong and "wrong user or password" in wrong

    def test_user_without_the_password_variable(self) -> None:
        """--user needs VLLM_SENTINEL_PASSWORD; a password is never taken from argv."""
        with _exporter(None, users=True) as url:
            err = _one_error_line(
                _run("status", "--url", url, "--user", "prometheus", env=_env(None))
            )
            usage = _run("status", "--url", url, "--password", PASSWORD, env=_env(None))
        assert "VLLM_SENTINEL_PASSWORD" in err
        assert usage.returncode == 2 and b"No such option" in usage.stderr

    def test_untrusted_certificate_is_one_line(self, tls_files: tuple[Path, Path]) -> None:
        """Without --cacert a self-signed certificate fails verification, said in one line."""
        with _exporter(tls_files, users=False) as url:
            err = _one_error_line(_run("status", "--url", url, env=_env()))
        assert "certificate verification failed" in err and "--cacert" in err

    def test_wrong_ca_is_one_line(self, tls_files: tuple[Path, Path], tmp_path: Path) -> None:
        """A CA file that did not sign the server's certificate fails verification."""
        other = tmp_path / "other"
        other.mkdir()
        other_ca, _ = write_self_signed(other)
        with _exporter(tls_files, users=False) as url:
            err = _one_error_line(_run("status", "--url", url, "--cacert", str(other_ca)))
        assert "certificate verification failed" in err

    def test_unreadable_ca_file_is_one_line(self, tmp_path: Path) -> None:
        """A --cacert that is missing or not PEM is named."""
        missing = _one_error_line(
            _run("status", "--url", "https://127.0.0.1:1", "--cacert", str(tmp_path / "no.pem"))
        )
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a certificate\n")
        bad = _one_error_line(
            _run("status", "--url", "https://127.0.0.1:1", "--cacert", str(garbage))
        )
        assert "--cacert" in missing and "no.pem" in missing
        assert "--cacert" in bad and "garbage.pem" in bad

    def test_connection_refused_is_one_line(self) -> None:
        """Nothing listening: 'connection refused', exit 2."""
        err = _one_error_line(_run("status", "--url", f"http://127.0.0.1:{free_port()}"))
        assert "connection refused" in err

    def test_only_http_urls(self, tmp_path: Path) -> None:
        """A file: URL (which urllib would open) is refused."""
        err = _one_error_line(_run("status", "--url", f"file://{tmp_path}"))
        assert "http://" in err


LLAMA = "vllm-llama-405b.service"


def _watch_demo(url: str) -> tuple[set[str], set[str], bool, list[float], bool]:
    """Poll /metrics until the demo showed phases moving, both crash causes, a stall, the
    Llama unit's ETA going down and its slow flag."""
    phases: set[str] = set()
    causes: set[str] = set()
    stalled = slow = False
    etas: list[float] = []  # the Llama unit's ETAs, in the order seen
    deadline = time.monotonic() + 50
    wanted = {"dependency_mismatch", "kv_cache_insufficient"}

    def counting_down() -> bool:
        return any(later < earlier for earlier, later in itertools.pairwise(etas))

    while time.monotonic() < deadline and not (
        causes >= wanted and stalled and len(phases) >= 3 and slow and counting_down()
    ):
        samples = scrape(url + "/metrics")
        if samples is None:
            time.sleep(0.2)  # the server is still starting: poll again, bounded by the deadline
            continue
        phase = current_phase(samples, "vllm-kimi-k25.service")
        if phase:
            phases.add(phase)
        causes |= {
            dict(labels)["cause"]
            for (name, labels), v in samples.items()
            if name == "vllm_sentinel_unit_crashes_total" and v > 0
        }
        stalled = stalled or value(samples, "vllm_sentinel_unit_stalled", unit=LLAMA) == 1
        slow = (
            slow
            or value(samples, "vllm_sentinel_unit_slow", unit=LLAMA, phase="loading_weights") == 1
        )
        eta = value(samples, "vllm_sentinel_unit_startup_eta_seconds", unit=LLAMA, basis="both")
        if eta is not None:
            etas.append(eta)
        time.sleep(0.2)
    return phases, causes, stalled, etas, slow


@pytest.mark.integration
def test_demo_shows_phases_moving_and_crash_causes() -> None:
    """``vllm-sentinel demo``: /metrics shows the phase moving, the crash causes, a stall, an ETA
    counting down and a slow start; status works."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--speed", "6", "--duration", "60"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        try:
            phases, causes, stalled, etas, slow = _watch_demo(url)
            status = subprocess.run(
                [*CLI, "status", "--url", url], capture_output=True, timeout=30, check=False
            )
        finally:
            demo.send_signal(signal.SIGINT)  # Ctrl-C, as the demo's banner says
            out, err = demo.communicate(timeout=10)
    assert demo.returncode == 0, err.decode()
    assert b"Traceback" not in err
    assert {"loading_weights", "crashed"} <= phases, phases
    assert causes >= {"dependency_mismatch", "kv_cache_insufficient"}
    assert stalled
    # the Llama unit's history gives an ETA (vLLM's bar for the shards, history for the rest)
    # that counts down while it loads, and it turns slower than usual before it stalls
    assert etas and min(etas) < max(etas), etas
    assert slow
    assert status.returncode == 0
    assert "vllm-kimi-k25.service" in status.stdout.decode()
    assert b"curl -s" in out


@pytest.mark.integration
def test_demo_counts_down_to_ready_through_cuda_graph_capture() -> None:
    """Kimi's CUDA graph capture in the demo: an ETA on every look, each above 0 (a bar whose
    time ran out is overdue, never 'ready in 0 s'), resting on history as well as vLLM's bar
    (the unit's earlier starts are in the demo's history from the beginning)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--speed", "2", "--duration", "60"]
    seen: list[tuple[object, object, object]] = []  # (eta_seconds, eta_basis, overdue)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        try:
            deadline = time.monotonic() + 55
            left = False
            while time.monotonic() < deadline and not left:
                answer = _unit_state(url, "vllm-kimi-k25.service")
                if answer is not None:
                    body = answer[1]
                    if body.get("phase") == "capturing_cuda_graphs":
                        seen.append(
                            (
                                body["eta_seconds"],
                                body["eta_basis"],
                                body.get("eta_overdue_seconds"),
                            )
                        )
                    left = bool(seen) and body.get("phase") != "capturing_cuda_graphs"
                time.sleep(0.05)  # the demo plays in real time: poll, bounded by the deadline
        finally:
            demo.send_signal(signal.SIGINT)
            demo.communicate(timeout=15)
    assert len(seen) >= 10, seen
    etas = [eta for eta, _, _ in seen]
    assert all(isinstance(eta, float) and eta > 0 for eta in etas), seen
    bases = {basis for _, basis, _ in seen}
    assert "both" in bases and bases <= {"both", "history"}, seen  # never the bar alone
    assert etas[-1] < etas[0], seen  # it counts down


def _demo_moment(url: str, moment: str) -> bool:
    """Whether the demo at ``url`` has reached ``moment``: ``serving`` (it answers), or
    ``UNIT=STATE`` (``/units`` says so)."""
    if moment == "serving":
        return _unit_state(url, "vllm-kimi-k25.service") is not None
    unit, state = moment.split("=")
    answer = _unit_state(url, unit)
    return answer is not None and answer[1].get("state") == state


DEMO_MOMENTS = (
    "serving",
    "serving",
    "vllm-kimi-k25.service=crashed",
    "vllm-qwen-14b.service=crashed",
    "vllm-llama-405b.service=starting",
    "vllm-qwen-14b.service=unhealthy",
)
"""When the Ctrl-C comes in each run: as soon as it serves (twice), and at moments where the
probe, the crash settling and the loads are busy."""


@pytest.mark.integration
def test_demo_stops_on_the_first_ctrl_c_every_time() -> None:
    """One SIGINT at each of ``DEMO_MOMENTS``: the demo exits 0 within 15 s every time (a bound
    for correctness, not speed: it stops in well under a second), never waiting for a second
    Ctrl-C."""
    for moment in DEMO_MOMENTS:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--speed", "6"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
            try:
                deadline = time.monotonic() + 60
                while not _demo_moment(url, moment):
                    assert time.monotonic() < deadline, f"the demo never reached {moment}"
                    time.sleep(0.05)  # the demo plays in real time: poll, bounded by the deadline
                demo.send_signal(signal.SIGINT)
                _, err = demo.communicate(timeout=15)
            finally:
                if demo.returncode is None:
                    demo.kill()
                    demo.communicate()
        assert demo.returncode == 0, (moment, demo.returncode, err.decode()[-2000:])
        assert b"Traceback" not in err, (moment, err.decode())


@pytest.mark.integration
@pytest.mark.parametrize("after", [0.3, 0.6, 0.9, 1.2])
def test_demo_ctrl_c_while_starting_is_a_clean_stop(after: float) -> None:
    """A Ctrl-C while the demo is still starting (``after`` seconds into it: importing, binding)
    stops it like any other: status 0, or 130 (killed by SIGINT) before Python runs our code,
    never click's ``Aborted!`` with status 1."""
    command = [*CLI, "demo", "--listen", f"127.0.0.1:{free_port()}"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        time.sleep(after)  # the moment of the Ctrl-C, not a wait for something
        demo.send_signal(signal.SIGINT)
        try:
            _, err = demo.communicate(timeout=15)
        finally:
            if demo.returncode is None:
                demo.kill()
                demo.communicate()
    assert demo.returncode in (0, -signal.SIGINT), (demo.returncode, err.decode())
    assert b"Aborted" not in err, err.decode()
    if demo.returncode == 0:  # our code stopped it: no traceback
        assert b"Traceback" not in err, err.decode()
    else:  # before our code ran (a loaded machine): killed by the signal's default action
        # while the interpreter initialised (nothing printed), or Python's own exit on SIGINT
        # while it imported (its KeyboardInterrupt traceback)
        assert err == b"" or err.rstrip().endswith(b"KeyboardInterrupt"), err.decode()
        assert b"vllm_sentinel/demo.py" not in err and b"in _demo" not in err, err.decode()


STUBBORN = """
import asyncio
from vllm_sentinel.cli import _until_signal

async def stubborn():
    print("ready", flush=True)
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # a task that misses its cancellation: never ends
            print("cancelled", flush=True)

asyncio.run(_until_signal(stubborn(), grace_seconds=1.0))
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    ("signals", "why"),
    [(1, "its clean-up took over 1 s"), (2, "a second signal")],
)
def test_a_stop_that_cannot_clean_up_still_ends(signals: int, why: str) -> None:
    """Whatever holds the clean-up (here a task that swallows its cancellation), a stopped
    command leaves: after the grace period, or at once on a second Ctrl-C, with status 130 and
    one line saying why."""
    with subprocess.Popen(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        child.send_signal(signal.SIGINT)
        assert child.stdout.readline() == b"cancelled\n"  # the first one was taken
        if signals == 2:
            child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=15)
    assert child.returncode == 130, err.decode()
    assert err.decode().strip() == f"vllm-sentinel: stopped at once ({why})"


def _unit_state(url: str, unit: str) -> tuple[int, dict[str, object]] | None:
    """GET /units/demo-gpu-01/UNIT: (status, JSON), or None while the server is starting."""
    try:
        reply = fetch(f"{url}/units/demo-gpu-01/{unit}")
    except OSError:
        return None
    return reply.status, reply.json()


@pytest.mark.integration
def test_demo_probes_health_and_serves_the_startup_endpoint() -> None:
    """The demo's /units answers 503 then 200 for Kimi, and Qwen turns unhealthy (503)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*CLI, "demo", "--listen", f"127.0.0.1:{port}", "--speed", "6", "--duration", "60"]
    seen: dict[str, set[tuple[int, str]]] = {
        "vllm-kimi-k25.service": set(),
        "vllm-qwen-14b.service": set(),
    }
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as demo:
        try:
            deadline = time.monotonic() + 55
            while time.monotonic() < deadline and not (
                (200, "ready") in seen["vllm-kimi-k25.service"]
                and (503, "unhealthy") in seen["vllm-qwen-14b.service"]
            ):
                for unit, states in seen.items():
                    answer = _unit_state(url, unit)
                    if answer is not None:
                        states.add((answer[0], str(answer[1]["state"])))
                time.sleep(0.2)  # the demo plays in real time: poll, bounded by the deadline
            with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
                samples = parse_metrics(response.read().decode())
        finally:
            demo.send_signal(signal.SIGINT)
            out, err = demo.communicate(timeout=10)
    assert demo.returncode == 0, err.decode()
    assert {(503, "starting"), (200, "ready")} <= seen["vllm-kimi-k25.service"], seen
    assert (503, "unhealthy") in seen["vllm-qwen-14b.service"], seen
    assert value(samples, "vllm_sentinel_unit_health_up", unit="vllm-kimi-k25.service") is not None
    assert b"until curl -fs" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["replay", "--last", "1", "x.log"],
            "vllm-sentinel: replay: Invalid value for '--last': 1 is not in the range x>=2 "
            "(see 'vllm-sentinel replay --help')",
        ),
        (["bogus"], "vllm-sentinel: No such command 'bogus' (see 'vllm-sentinel --help')"),
        (["--bogus"], "vllm-sentinel: No such option '--bogus' (see 'vllm-sentinel --help')"),
        (
            ["replay"],
            "vllm-sentinel: replay: Missing argument 'FILES...' (see 'vllm-sentinel replay --help')",
        ),
        (
            ["demo", "--log-level", "loud"],
            "vllm-sentinel: demo: Invalid value for '--log-level': 'loud' is not one of "
            "'debug', 'info', 'warning', 'error' (see 'vllm-sentinel demo --help')",
        ),
        # no command at all: click's error message is the whole help (a new user's trial saw
        # it glued behind "vllm-sentinel: " and cut)
        ([], "vllm-sentinel: Missing command (see 'vllm-sentinel --help')"),
    ],
    ids=["bad-value", "no-command", "no-option", "missing-argument", "bad-choice", "bare"],
)
def test_a_usage_error_is_one_line_and_status_2(args: list[str], expected: str) -> None:
    """Click's usage errors are three lines (usage, hint, error); ours are one, like every error."""
    result = subprocess.run(
        [sys.executable, "-m", "vllm_sentinel", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [expected]
