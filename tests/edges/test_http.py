"""The HTTP endpoint: a real threaded server on 127.0.0.1, plain, with TLS and basic auth."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from structlog.testing import capture_logs

from tests.support.http_client import basic, bcrypt_hash, fetch
from tests.support.snapshots import basic_snapshot
from vllm_sentinel import __version__
from vllm_sentinel.engine.catalog.causes import CrashCause
from vllm_sentinel.engine.report import status_document, to_json
from vllm_sentinel.errors import ConfigError
from vllm_sentinel.serve import http as sentinel_http
from vllm_sentinel.serve.exporter import SentinelCollector, make_registry
from vllm_sentinel.serve.http import (
    DEFAULT_LISTEN_HOST,
    BasicAuthenticator,
    ServerHandle,
    WebConfig,
    build_ssl_context,
    load_web_config,
    make_app,
    start_http_server,
)
from vllm_sentinel.serve.runbook import read_runbook

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "vllm-sentinel-rules.yml"
RUNBOOK_MD = ROOT / "docs" / "runbook.md"

PASSWORD = "correct horse battery staple"


def status() -> dict[str, Any]:
    snapshot = basic_snapshot()
    return to_json(unit for host in snapshot.hosts for unit in host.units)


@contextmanager
def serving(
    authenticator: BasicAuthenticator | None = None, ssl_context: ssl.SSLContext | None = None
) -> Iterator[ServerHandle]:
    registry = make_registry(SentinelCollector(basic_snapshot))
    app = make_app(registry, status, authenticator=authenticator)
    handle = start_http_server(DEFAULT_LISTEN_HOST, 0, app, ssl_context=ssl_context)
    try:
        yield handle
    finally:
        handle.shutdown()


def client_context(cert_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_file))


class TestPlainHttp:
    def test_metrics_in_text_format(self) -> None:
        """/metrics serves the table in the Prometheus text format 0.0.4."""
        with serving() as server:
            reply = fetch(f"http://127.0.0.1:{server.port}/metrics")
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = reply.body.decode()
        assert (
            'vllm_sentinel_unit_phase{host="gpu-a",phase="loading_weights",'
            'unit="vllm-llama.service"} 1.0' in text
        )

    def test_metrics_in_openmetrics_when_asked(self) -> None:
        """An OpenMetrics Accept header gets OpenMetrics, ending in ``# EOF``."""
        with serving() as server:
            reply = fetch(
                f"http://127.0.0.1:{server.port}/metrics",
                headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            )
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("application/openmetrics-text")
        assert reply.body.endswith(b"# EOF\n")

    def test_status_is_json(self) -> None:
        """/status serves the status callable's document as JSON."""
        with serving() as server:
            reply = fetch(f"http://127.0.0.1:{server.port}/status")
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "application/json"
        assert json.loads(reply.body) == json.loads(json.dumps(status()))

    def test_healthz(self) -> None:
        """/healthz answers 200 ok."""
        with serving() as server:
            reply = fetch(f"http://127.0.0.1:{server.port}/healthz")
        assert (reply.status, reply.body) == (200, b"ok\n")

    def test_index_links_the_endpoints(self) -> None:
        """/ is a small page linking metrics, status and healthz."""
        with serving() as server:
            reply = fetch(f"http://127.0.0.1:{server.port}/")
        assert reply.status == 200
        for link in (b'href="metrics"', b'href="status"', b'href="healthz"'):
            assert link in reply.body

    def test_unknown_path_is_404_and_wrong_method_405(self) -> None:
        """Unknown paths are 404; POST to a read-only path is 405."""
        with serving() as server:
            missing = fetch(f"http://127.0.0.1:{server.port}/nope")
            posted = fetch(f"http://127.0.0.1:{server.port}/status", method="POST")
        assert missing.status == 404
        assert posted.status == 405
        assert posted.headers["Allow"] == "GET, HEAD"

    def test_binds_loopback_and_reports_the_real_port(self) -> None:
        """Port 0 binds a free port on 127.0.0.1 and the handle says which."""
        with serving() as server:
            assert server.host == DEFAULT_LISTEN_HOST == "127.0.0.1"
            assert server.port > 0

    def test_empty_host_is_every_ipv4_interface(self) -> None:
        """``""`` (config's ``:PORT``) binds all IPv4 interfaces, loopback included."""
        app = make_app(make_registry(SentinelCollector(basic_snapshot)), status)
        server = start_http_server("", 0, app)
        try:
            assert server.host == "0.0.0.0"
            assert fetch(f"http://127.0.0.1:{server.port}/healthz").status == 200
        finally:
            server.shutdown()

    def test_shutdown_frees_the_port(self) -> None:
        """After shutdown the server no longer answers."""
        with serving() as server:
            port = server.port
        with pytest.raises(urllib.error.URLError):
            fetch(f"http://127.0.0.1:{port}/healthz")

    def test_concurrent_connections_are_served(self) -> None:
        """A client that connects and sends nothing does not block other requests."""
        with serving() as server:
            idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            idle.connect()
            try:
                reply = fetch(f"http://127.0.0.1:{server.port}/healthz")
            finally:
                idle.close()
        assert reply.status == 200


class TestStatusPage:
    """``/`` is the status page over the ``/status`` document; its assets come from the daemon."""

    @staticmethod
    @contextmanager
    def page_server(authenticator: BasicAuthenticator | None = None) -> Iterator[str]:
        def document() -> dict[str, Any]:
            return status_document(basic_snapshot())

        app = make_app(
            make_registry(SentinelCollector(basic_snapshot)), document, authenticator=authenticator
        )
        handle = start_http_server(DEFAULT_LISTEN_HOST, 0, app)
        try:
            yield f"http://127.0.0.1:{handle.port}"
        finally:
            handle.shutdown()

    def test_page_is_html_with_a_strict_content_security_policy(self) -> None:
        """The page names the units of /status; only the daemon's own script and style run."""
        with self.page_server() as url:
            reply = fetch(url + "/")
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
        policy = reply.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert reply.headers["Cache-Control"] == "no-store"
        body = reply.body.decode()
        assert body.startswith("<!doctype html>")
        for unit in ("vllm-llama.service", "vllm-qwen.service", "vllm-mixtral.service"):
            assert f'data-key="unit:gpu-{"b" if "mixtral" in unit else "a"}/{unit}"' in body
        assert 'data-refresh="5"' in body

    def test_main_part_is_the_fragment_the_script_swaps_in(self) -> None:
        """``?part=main`` is the content of <main> alone: the same rows, no page around them."""
        with self.page_server() as url:
            part = fetch(url + "/?part=main").body.decode()
            page = fetch(url + "/").body.decode()
        assert part.startswith('<p class="summary"') and "<html" not in part
        assert part.strip() in page

    @pytest.mark.parametrize(("query", "seconds"), [("2", "2"), ("0", "5"), ("x", "5")])
    def test_refresh_interval_can_be_asked_for(self, query: str, seconds: str) -> None:
        """``?refresh=SECONDS`` within 1–300 sets the script's interval; anything else, 5."""
        with self.page_server() as url:
            body = fetch(f"{url}/?refresh={query}").body.decode()
        assert f'data-refresh="{seconds}"' in body

    @pytest.mark.parametrize(
        ("name", "kind"),
        [
            ("status.css", "text/css; charset=utf-8"),
            ("status.js", "text/javascript; charset=utf-8"),
        ],
    )
    def test_assets_are_served_from_package_data(self, name: str, kind: str) -> None:
        """CSS and JS come from the package (no CDN), cacheable (their URL has the version)."""
        expected = resources.files("vllm_sentinel.serve").joinpath("static", name).read_bytes()
        with self.page_server() as url:
            reply = fetch(f"{url}/static/{name}")
        assert (reply.status, reply.body) == (200, expected)
        assert reply.headers["Content-Type"] == kind
        assert reply.headers["Cache-Control"] == "public, max-age=3600"

    @pytest.mark.parametrize(
        "path", ["/static/", "/static/nope.js", "/static/../http.py", "/x.css"]
    )
    def test_other_static_paths_are_404(self, path: str) -> None:
        """Only the listed assets are served: no directory listing, no path into the package."""
        with self.page_server() as url:
            assert fetch(url + path).status == 404

    def test_page_and_assets_need_credentials_when_users_are_configured(self) -> None:
        """Behind the same basic auth as /metrics and /status."""
        authenticator = BasicAuthenticator({"viewer": bcrypt_hash(PASSWORD)})
        with self.page_server(authenticator) as url:
            anonymous = [
                fetch(url + path).status for path in ("/", "/?part=main", "/static/status.js")
            ]
            signed_in = fetch(url + "/", headers=basic("viewer", PASSWORD))
        assert anonymous == [401, 401, 401]
        assert signed_in.status == 200 and b"vllm-llama.service" in signed_in.body

    def test_head_has_no_body(self) -> None:
        """HEAD / answers the headers only."""
        with self.page_server() as url:
            reply = fetch(url + "/", method="HEAD")
        assert reply.status == 200 and reply.body == b""
        assert int(reply.headers["Content-Length"]) > 1000


class TestTls:
    def test_https_with_a_trusted_self_signed_certificate(
        self, tmp_path: Path, tls_files: tuple[Path, Path]
    ) -> None:
        """A web config with tls_server_config serves HTTPS that a verifying client accepts."""
        cert_file, _ = tls_files
        config_file = tmp_path / "web.yml"
        config_file.write_text(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        )
        config = load_web_config(config_file)
        assert config.tls is not None
        with serving(ssl_context=build_ssl_context(config.tls)) as server:
            reply = fetch(
                f"https://127.0.0.1:{server.port}/metrics", context=client_context(cert_file)
            )
        assert reply.status == 200
        assert b"vllm_sentinel_unit_phase" in reply.body

    def test_plain_http_to_the_tls_port_fails_and_the_server_keeps_serving(
        self, tls_files: tuple[Path, Path]
    ) -> None:
        """A failed handshake drops that connection only."""
        cert_file, key_file = tls_files
        tls = sentinel_http.TlsServerConfig(cert_file=cert_file, key_file=key_file)
        with serving(ssl_context=build_ssl_context(tls)) as server:
            with pytest.raises((OSError, http.client.HTTPException)):
                fetch(f"http://127.0.0.1:{server.port}/healthz")
            reply = fetch(
                f"https://127.0.0.1:{server.port}/healthz", context=client_context(cert_file)
            )
        assert reply.status == 200

    def test_a_stalled_handshake_does_not_block_other_clients(
        self, tls_files: tuple[Path, Path]
    ) -> None:
        """The handshake runs on the connection's thread, not in accept()."""
        cert_file, key_file = tls_files
        tls = sentinel_http.TlsServerConfig(cert_file=cert_file, key_file=key_file)
        with (
            serving(ssl_context=build_ssl_context(tls)) as server,
            socket.create_connection(("127.0.0.1", server.port), timeout=10),
        ):
            reply = fetch(
                f"https://127.0.0.1:{server.port}/healthz", context=client_context(cert_file)
            )
        assert reply.status == 200

    def test_untrusted_certificate_is_refused_by_the_client(
        self, tls_files: tuple[Path, Path]
    ) -> None:
        """A client that does not trust the certificate cannot connect (the TLS is real)."""
        cert_file, key_file = tls_files
        tls = sentinel_http.TlsServerConfig(cert_file=cert_file, key_file=key_file)
        with (
            serving(ssl_context=build_ssl_context(tls)) as server,
            pytest.raises(urllib.error.URLError) as caught,
        ):
            fetch(f"https://127.0.0.1:{server.port}/healthz", context=ssl.create_default_context())
        assert isinstance(caught.value.reason, ssl.SSLCertVerificationError)

    def test_missing_certificate_is_a_config_error(self, tmp_path: Path) -> None:
        """A TLS section naming missing files fails at startup, not at the first scrape."""
        tls = sentinel_http.TlsServerConfig(
            cert_file=tmp_path / "nope.crt", key_file=tmp_path / "nope.key"
        )
        with pytest.raises(ConfigError, match=r"nope\.crt"):
            build_ssl_context(tls)


class TestBasicAuth:
    @pytest.fixture
    def authenticator(self, tmp_path: Path) -> BasicAuthenticator:
        config_file = tmp_path / "web.yml"
        config_file.write_text(f"basic_auth_users:\n  prometheus: '{bcrypt_hash(PASSWORD)}'\n")
        config = load_web_config(config_file)
        return BasicAuthenticator(config.basic_auth_users)

    def test_right_password_is_200(self, authenticator: BasicAuthenticator) -> None:
        """The configured user with the right password gets the metrics."""
        with serving(authenticator) as server:
            reply = fetch(
                f"http://127.0.0.1:{server.port}/metrics", headers=basic("prometheus", PASSWORD)
            )
        assert reply.status == 200

    def test_wrong_or_missing_password_is_401_with_a_challenge(
        self, authenticator: BasicAuthenticator
    ) -> None:
        """Wrong password, unknown user and no header all get 401 and WWW-Authenticate."""
        with serving(authenticator) as server:
            url = f"http://127.0.0.1:{server.port}/metrics"
            replies = [
                fetch(url, headers=basic("prometheus", "wrong")),
                fetch(url, headers=basic("nobody", PASSWORD)),
                fetch(url),
                fetch(url, headers={"Authorization": "Bearer abc"}),
                fetch(url, headers={"Authorization": "Basic !!!notbase64"}),
            ]
        for reply in replies:
            assert reply.status == 401
            assert reply.headers["WWW-Authenticate"].startswith('Basic realm="vllm-sentinel"')
            assert b"vllm_sentinel" not in reply.body

    def test_status_is_protected_and_healthz_is_not(
        self, authenticator: BasicAuthenticator
    ) -> None:
        """/status and / need credentials; /healthz answers anyone."""
        with serving(authenticator) as server:
            base = f"http://127.0.0.1:{server.port}"
            assert fetch(f"{base}/status").status == 401
            assert fetch(f"{base}/").status == 401
            assert fetch(f"{base}/healthz").status == 200

    def test_basic_auth_over_tls(self, tmp_path: Path, tls_files: tuple[Path, Path]) -> None:
        """One web config with both sections: HTTPS and basic auth together."""
        cert_file, _ = tls_files
        config_file = tmp_path / "web.yml"
        config_file.write_text(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            f"basic_auth_users:\n  prometheus: '{bcrypt_hash(PASSWORD)}'\n"
        )
        config = load_web_config(config_file)
        assert config.tls is not None
        context = client_context(cert_file)
        with serving(
            BasicAuthenticator(config.basic_auth_users), build_ssl_context(config.tls)
        ) as server:
            url = f"https://127.0.0.1:{server.port}/metrics"
            good = fetch(url, context=context, headers=basic("prometheus", PASSWORD))
            bad = fetch(url, context=context, headers=basic("prometheus", "nope"))
        assert (good.status, bad.status) == (200, 401)


class TestBasicAuthenticator:
    def counting(self, monkeypatch: pytest.MonkeyPatch) -> list[int]:
        calls: list[int] = []
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            calls.append(1)
            return real(password, hashed)

        monkeypatch.setattr(bcrypt, "checkpw", checkpw)
        return calls

    def test_success_is_cached_until_it_expires(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A repeated right password skips bcrypt within the cache time, not after."""
        now = [100.0]
        auth = BasicAuthenticator(
            {"u": bcrypt_hash(PASSWORD)}, cache_seconds=60.0, clock=lambda: now[0]
        )
        calls = self.counting(monkeypatch)
        header = basic("u", PASSWORD)["Authorization"]
        assert auth.is_authorized(header)
        assert auth.is_authorized(header)
        assert len(calls) == 1
        now[0] += 61.0
        assert auth.is_authorized(header)
        assert len(calls) == 2

    def test_cache_never_accepts_another_password(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """After a success, a wrong password for the same user still goes to bcrypt and fails."""
        auth = BasicAuthenticator({"u": bcrypt_hash(PASSWORD)}, clock=lambda: 0.0)
        calls = self.counting(monkeypatch)
        assert auth.is_authorized(basic("u", PASSWORD)["Authorization"])
        assert not auth.is_authorized(basic("u", PASSWORD + "x")["Authorization"])
        assert len(calls) == 2

    def test_unknown_user_costs_a_bcrypt_check(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An unknown name is checked against a dummy hash, so timing does not reveal users."""
        auth = BasicAuthenticator({"u": bcrypt_hash(PASSWORD)})
        calls = self.counting(monkeypatch)
        assert not auth.is_authorized(basic("ghost", PASSWORD)["Authorization"])
        assert len(calls) == 1

    def test_password_longer_than_bcrypt_allows_is_refused(self) -> None:
        """A password over 72 bytes is a failed check, not a server error."""
        auth = BasicAuthenticator({"u": bcrypt_hash(PASSWORD)})
        assert not auth.is_authorized(basic("u", "p" * 200)["Authorization"])

    def test_password_may_contain_colons(self) -> None:
        """Only the first colon separates the user from the password."""
        auth = BasicAuthenticator({"u": bcrypt_hash("a:b:c")})
        assert auth.is_authorized(basic("u", "a:b:c")["Authorization"])


class TestLoadWebConfig:
    def test_empty_file_means_plain_http_without_auth(self, tmp_path: Path) -> None:
        """An empty web config is valid and changes nothing."""
        path = tmp_path / "web.yml"
        path.write_text("")
        assert load_web_config(path) == WebConfig()

    def test_relative_paths_are_relative_to_the_config_file(self, tmp_path: Path) -> None:
        """cert_file and key_file resolve against the web config's directory."""
        path = tmp_path / "web.yml"
        path.write_text(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: /abs/b.key\n  min_version: TLS13\n"
        )
        tls = load_web_config(path).tls
        assert tls is not None
        assert tls.cert_file == tmp_path / "a.crt"
        assert tls.key_file == Path("/abs/b.key")
        assert tls.min_version is ssl.TLSVersion.TLSv1_3

    def test_htpasswd_2y_hashes_are_accepted(self, tmp_path: Path) -> None:
        """Hashes made by ``htpasswd -B`` (``$2y$``) verify."""
        hashed = bcrypt_hash(PASSWORD).replace("$2b$", "$2y$", 1)
        path = tmp_path / "web.yml"
        path.write_text(f"basic_auth_users:\n  p: '{hashed}'\n")
        auth = BasicAuthenticator(load_web_config(path).basic_auth_users)
        assert auth.is_authorized(basic("p", PASSWORD)["Authorization"])

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("tls_server_config:\n  cert_file: a\n", "key_file"),
            ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n", "client"),
            ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n", "cipher"),
            ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS11\n", "TLS12"),
            ("http_server_config:\n  http2: false\n", "http_server_config"),
            ("surprise: 1\n", "surprise"),
            ("- a list\n", "mapping"),
            ("basic_auth_users: [a]\n", "basic_auth_users"),
            ("tls_server_config: [\n", "YAML"),
        ],
    )
    def test_bad_or_unsupported_keys_are_rejected(
        self, tmp_path: Path, text: str, match: str
    ) -> None:
        """Anything the server would not honour is a ConfigError naming the file and key."""
        path = tmp_path / "web.yml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=match) as caught:
            load_web_config(path)
        assert str(path) in str(caught.value)

    def test_plain_password_is_rejected_without_being_echoed(self, tmp_path: Path) -> None:
        """A password pasted instead of its hash is refused, and not repeated in the error."""
        path = tmp_path / "web.yml"
        path.write_text("basic_auth_users:\n  prometheus: hunter2-plain\n")
        with pytest.raises(ConfigError, match="not a bcrypt hash") as caught:
            load_web_config(path)
        assert "hunter2" not in str(caught.value)

    def test_missing_file_is_a_config_error(self, tmp_path: Path) -> None:
        """A web config path that does not exist is a ConfigError."""
        with pytest.raises(ConfigError, match="cannot read"):
            load_web_config(tmp_path / "absent.yml")

    def test_hashes_are_not_in_the_repr(self, tmp_path: Path) -> None:
        """WebConfig's repr (which may reach logs) leaves the hashes out."""
        hashed = bcrypt_hash(PASSWORD)
        config = WebConfig(basic_auth_users={"u": hashed})
        assert hashed not in repr(config)


class TestRunbook:
    """``/runbook``: docs/runbook.md as HTML, with the anchors the alerts link to."""

    def test_every_alert_and_cause_has_its_anchor(self) -> None:
        """The page carries an id per alert (runbook_url) and per crash cause."""
        rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
        alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
        with serving() as server:
            reply = fetch(f"http://127.0.0.1:{server.port}/runbook")
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
        page = reply.body.decode()
        assert page.startswith("<!DOCTYPE html>") and "<title>vllm-sentinel runbook</title>" in page
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', page))
        assert {alert.lower() for alert in alerts} <= ids
        assert {cause.value for cause in CrashCause} <= ids
        assert '<a href="#crash-causes">crash causes</a>' in page
        assert '<pre><code class="language-sh">systemctl status UNIT' in page  # fenced code

    def test_it_needs_the_password_like_metrics(self, tmp_path: Path) -> None:
        """Behind the same basic auth as /metrics and /status."""
        config_file = tmp_path / "web.yml"
        config_file.write_text(f"basic_auth_users:\n  prometheus: '{bcrypt_hash(PASSWORD)}'\n")
        authenticator = BasicAuthenticator(load_web_config(config_file).basic_auth_users)
        with serving(authenticator) as server:
            url = f"http://127.0.0.1:{server.port}/runbook"
            assert fetch(url).status == 401
            assert fetch(url, headers=basic("prometheus", PASSWORD)).status == 200
            assert fetch(url, headers=basic("prometheus", PASSWORD), method="HEAD").body == b""

    def test_the_index_links_it(self) -> None:
        """/ lists the runbook next to metrics and status."""
        with serving() as server:
            page = fetch(f"http://127.0.0.1:{server.port}/").body.decode()
        assert '<a href="runbook">runbook</a>' in page

    def test_read_from_the_checkout_without_a_packaged_copy(self) -> None:
        """A checkout (or editable install) has no vllm_sentinel/serve/runbook.md: docs/ is read."""
        assert read_runbook() == RUNBOOK_MD.read_text(encoding="utf-8")


class TestServerName:
    """Every answer names vllm-sentinel and its version, never the Python version."""

    def test_every_response_carries_our_server_header(self) -> None:
        """/metrics, /status, 404, 405, and a request the HTTP layer refuses itself (issue 15
        §8: ``Server: WSGIServer/0.2 CPython/3.11.7``)."""
        expected = f"vllm-sentinel/{__version__}"
        with serving() as server:
            base = f"http://127.0.0.1:{server.port}"
            replies = [
                fetch(f"{base}/metrics"),
                fetch(f"{base}/status"),
                fetch(f"{base}/nope"),
                fetch(f"{base}/status", method="POST"),
            ]
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
                # a header line too long: answered 431 by http.server itself, not the app
                raw.sendall(b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n")
                chunks = []
                while chunk := raw.recv(4096):
                    chunks.append(chunk)
                answer = b"".join(chunks).decode("latin-1")
        assert [reply.status for reply in replies] == [200, 200, 404, 405]
        for reply in replies:
            assert reply.headers.get_all("Server") == [expected]
        assert answer.startswith("HTTP/1.0 431")
        assert f"\r\nServer: {expected}\r\n" in answer
        assert "Python" not in answer


class TestFailedLogins:
    """Refused requests are logged: who and as which user, never the password; rate-limited."""

    def test_failures_are_logged_once_a_minute_with_their_count_and_no_password(
        self, tmp_path: Path
    ) -> None:
        """Five wrong passwords in a burst: one ``http_auth_failed`` line; a minute later the
        next failure logs again with the four it kept quiet (issue 15 §8: not logged at all)."""
        now = [1000.0]
        users = {"prometheus": bcrypt_hash(PASSWORD)}
        authenticator = BasicAuthenticator(users, clock=lambda: now[0])
        with serving(authenticator) as server, capture_logs() as logs:
            url = f"http://127.0.0.1:{server.port}/metrics"
            for _ in range(5):
                assert fetch(url, headers=basic("prometheus", "hunter2-secret")).status == 401
            now[0] += 61
            assert fetch(url, headers=basic("mallory", "hunter2-secret")).status == 401
            assert fetch(url, headers=basic("prometheus", PASSWORD)).status == 200
        failures = [event for event in logs if event["event"] == "http_auth_failed"]
        assert [(e["user"], e["failures"], e["path"]) for e in failures] == [
            ("prometheus", 1, "/metrics"),
            ("mallory", 5, "/metrics"),
        ]
        assert all(e["client"] == "127.0.0.1" and e["log_level"] == "warning" for e in failures)
        assert "hunter2" not in repr(logs)
