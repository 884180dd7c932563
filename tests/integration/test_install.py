"""docs/install.md's install and uninstall blocks, run as written, in a booted root.

Where: ``tests/support/booted_root.py`` — an overlay of this machine's ``/`` with systemd as
PID 1 in its own mount, PID and network namespaces. That is what genuinely runs here: the CI
machine is root but not booted by systemd (``systemctl`` answers "System has not been booted
with systemd"), and a chroot alone would leave ``systemctl enable --now`` untested; the overlay
keeps the host's users, ``/opt`` and ``/etc/systemd`` untouched, and the network namespace keeps
the daemon's port away from the host's.

What differs from a fresh host, and why: the commands run in a copy of the checkout (as
``git clone`` leaves it); pip installs offline from a wheelhouse built once per session
(``PIP_NO_INDEX``, ``PIP_FIND_LINKS``: the root has no network) and with
``VLLM_SENTINEL_PURE=1`` (the mypyc compile takes about a minute; ``scripts/check-compiled`` tests the
compiled build). Before the install, two services log vLLM start-up lines into the root's
journal — ``vllm-test.service`` and ``llm-serve.service`` (vLLM under another name) — so
that ``init-config`` has something real to find and the running daemon something to report.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.integration.conftest import BuiltPackage
from tests.support.booted_root import BootedRoot, BootError
from tests.support.packaging import ROOT

# the worker that builds the session's wheelhouse (``built_package``) under pytest-xdist
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("built_package")]

INSTALL_DOC = ROOT / "docs" / "install.md"
CHECKOUT = "/root/vllm-sentinel"
WHEELHOUSE = "/mnt/wheelhouse"
VENV = "/opt/vllm-sentinel"
UNIT = "/etc/systemd/system/vllm-sentinel.service"
CONFIG = "/etc/vllm-sentinel/config.toml"
URL = "http://127.0.0.1:9842"

# A vLLM 0.8 start as its journal shows it: the banner, then ready; the process stays up.
_VLLM_LINES = (
    "INFO 12-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
    "INFO 12-01 10:00:09 [launcher.py:26] Available routes are:",
    "INFO:     Application startup complete.",
)


def doc_block(name: str) -> str:
    """The shell block between ``<!-- NAME: … -->`` and ``<!-- /NAME -->`` in docs/install.md."""
    text = INSTALL_DOC.read_text(encoding="utf-8")
    match = re.search(
        rf"^<!-- {name}: [^\n]*-->\n```sh\n(?P<body>.*?)\n```\n<!-- /{name} -->$",
        text,
        re.MULTILINE | re.DOTALL,
    )
    assert match is not None, f"docs/install.md has no <!-- {name} --> block"
    return match["body"] + "\n"


def _fake_vllm(root: BootedRoot, unit: str) -> None:
    """Start a transient service that logs a vLLM start and stays up (systemd-run)."""
    script = "; ".join(f"echo {line!r}" for line in _VLLM_LINES) + "; exec sleep infinity"
    result = root.run(["systemd-run", f"--unit={unit}", "/bin/sh", "-c", script])
    assert result.returncode == 0, result.stderr.decode()


# Root's own interpreter first on PATH, as pyenv (``/root/.pyenv/shims``) or a user install
# leaves it: ``/root`` is mode 0700, so a venv made from it cannot run as the service user.
ROOT_PYTHON_DIR = "/root/.local/python/bin"


def _run_block(root: BootedRoot, name: str) -> subprocess.CompletedProcess[bytes]:
    """Run docs/install.md's block NAME with bash -e in the checkout, as root, offline pip, with a
    ``python3`` under ``/root`` first on PATH."""
    env = {
        "PATH": f"{ROOT_PYTHON_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": WHEELHOUSE,
        "PIP_CONFIG_FILE": "/dev/null",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "VLLM_SENTINEL_PURE": "1",
    }
    script = "set -euxo pipefail\n" + doc_block(name)
    return root.run(["bash", "-c", script], cwd=CHECKOUT, env=env, timeout=300)


def _wait_for(root: BootedRoot, argv: list[str], wanted: str, seconds: float = 60) -> str:
    """Run ``argv`` in the root until its output matches the regex ``wanted``; return it."""
    deadline = time.monotonic() + seconds
    output = ""
    while time.monotonic() < deadline:
        result = root.run(argv, timeout=30)
        output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
        if result.returncode == 0 and re.search(wanted, output, re.MULTILINE):
            return output
        time.sleep(0.2)
    journal = root.run(["journalctl", "-u", "vllm-sentinel", "--no-pager", "-n", "50"])
    pytest.fail(f"{wanted!r} not in {argv} after {seconds} s:\n{output}\n{journal.stdout.decode()}")


def _get(root: BootedRoot, path: str) -> bytes:
    """GET the daemon's ``path`` from inside the root (its Python: no curl needed)."""
    probe = f"import urllib.request as u; print(u.urlopen('{URL}{path}', timeout=10).read().hex())"
    result = root.run([f"{VENV}/bin/python", "-c", probe])
    assert result.returncode == 0, result.stderr.decode()
    return bytes.fromhex(result.stdout.decode().strip())


@pytest.fixture
def root(tmp_path: Path, built_package: BuiltPackage) -> Iterator[BootedRoot]:
    """A booted throwaway root with a copy of the checkout and the session's wheelhouse."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the install test runs as root in CI (scripts/test)")
        pytest.skip("the install runs as root (overlay mounts, namespaces, systemd)")
    require_binary("unshare")
    require_binary("nsenter")
    require_binary("/lib/systemd/systemd")
    for path in ("/opt/vllm-sentinel", "/etc/vllm-sentinel", UNIT):
        assert not Path(path).exists(), f"{path} exists on this machine: not a clean lower layer"
    booted = BootedRoot(tmp_path / "root", binds={WHEELHOUSE: built_package.wheelhouse})
    private = booted.path(ROOT_PYTHON_DIR)
    private.mkdir(parents=True)
    (private / "python3").symlink_to("/usr/bin/python3")  # what `python3` is for root here
    booted.path("/root").chmod(0o700)  # as on a host (the overlay takes the upper's mode)
    checkout = booted.path(CHECKOUT)
    checkout.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(built_package.tree), str(checkout)], check=True)
    try:
        booted.start()
    except BootError as error:
        pytest.fail(str(error))  # root and overlayfs are what CI has: a boot failure is a failure
    try:
        yield booted
    finally:
        booted.stop()


def test_install_then_uninstall_as_written(root: BootedRoot) -> None:
    """From a checkout to a hardened service serving the host's vLLM units, and back to nothing."""
    _fake_vllm(root, "vllm-test.service")
    _fake_vllm(root, "llm-serve.service")
    _wait_for(root, ["journalctl", "-u", "llm-serve.service", "-o", "cat"], r"startup complete\.$")

    installed = _run_block(root, "install")
    log = installed.stdout.decode(errors="replace") + installed.stderr.decode(errors="replace")
    assert installed.returncode == 0, log[-5000:]

    # the documented check-config ran on the generated config: OK, this host's units
    assert f"{CONFIG}: OK" in log
    config = tomllib.loads(root.path(CONFIG).read_text(encoding="utf-8"))
    (host,) = config["hosts"]
    assert host["local"] is True
    assert host["units"] == ["vllm*.service", "llm-serve.service"]
    assert host["gpu"] == "none"  # no NVML here; said in a comment
    text = root.path(CONFIG).read_text(encoding="utf-8")
    assert "#   llm-serve.service (vLLM banner)\n" in text
    assert "#   vllm-test.service (journal, vLLM banner, systemd)\n" in text
    mode = root.path(CONFIG).stat()
    assert stat.S_IMODE(mode.st_mode) == 0o640

    # the installed unit runs the venv's command and passes systemd-analyze verify (in the block)
    assert f"ExecStart={VENV}/bin/vllm-sentinel run" in root.path(UNIT).read_text()
    verify = root.run(["systemd-analyze", "verify", UNIT])
    assert verify.returncode == 0, verify.stderr.decode()

    # the service: active, as the system user in systemd-journal, with its state directory
    show = root.run(
        ["systemctl", "show", "vllm-sentinel", "-p", "ActiveState", "-p", "User", "-p",
         "SupplementaryGroups", "-p", "UnitFileState"],
    )  # fmt: skip
    assert sorted(show.stdout.decode().split()) == [
        "ActiveState=active",
        "SupplementaryGroups=systemd-journal",
        "UnitFileState=enabled",
        "User=vllm-sentinel",
    ]
    # then, as docs/install.md says, `status` shows both units once the journal is read
    status = [f"{VENV}/bin/vllm-sentinel", "status"]
    output = _wait_for(root, status, r"^\S+\s+llm-serve\.service\s+ready\s")
    assert re.search(r"^\S+\s+vllm-test\.service\s+ready\s", output, re.MULTILINE), output
    metrics = _get(root, "/metrics").decode()
    ready = [
        line
        for line in metrics.splitlines()
        if line.startswith("vllm_sentinel_unit_phase{") and 'unit="vllm-test.service"' in line
    ]
    assert [line for line in ready if line.endswith(" 1.0")] == [
        f'vllm_sentinel_unit_phase{{host="{host["name"]}",phase="ready",unit="vllm-test.service"}} 1.0'
    ], ready
    assert b'<h2 id="vllmcrashed">VllmCrashed</h2>' in _get(root, "/runbook")
    main_pid = root.run(["systemctl", "show", "vllm-sentinel", "-p", "MainPID", "--value"])
    pid = main_pid.stdout.decode().strip()
    uid = root.run(["id", "-u", "vllm-sentinel"]).stdout.decode().strip()
    status_lines = root.run(["cat", f"/proc/{pid}/status"]).stdout.decode().splitlines()
    assert f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}" in status_lines
    assert "CapEff:\t0000000000000000" in status_lines
    assert "NoNewPrivs:\t1" in status_lines
    state = root.run(["stat", "-c", "%U %a", "/var/lib/vllm-sentinel"]).stdout.decode().split()
    assert state == ["vllm-sentinel", "750"]

    removed = _run_block(root, "uninstall")
    log = removed.stdout.decode(errors="replace") + removed.stderr.decode(errors="replace")
    assert removed.returncode == 0, log[-5000:]
    gone = root.run(["systemctl", "status", "vllm-sentinel", "--no-pager"])
    assert gone.returncode == 4, gone.stdout.decode()  # no such unit
    accounts = root.run(["grep", "-h", "vllm-sentinel", "/etc/passwd", "/etc/group", "/etc/shadow"])
    assert accounts.stdout == b""
    assert _leftovers(root) == []


def _leftovers(root: BootedRoot) -> list[str]:
    """Paths written in the root that name vllm-sentinel, other than the checkout itself."""
    found = []
    for path in root.upper.rglob("*"):
        inside = "/" + str(path.relative_to(root.upper))
        if inside.startswith((CHECKOUT, "/root/.cache", "/var/log/journal")):
            continue
        if stat.S_ISCHR(path.lstat().st_mode):
            continue  # an overlay whiteout: a deletion of a file of the lower layer
        if "vllm-sentinel" in path.name or "vllm_sentinel" in path.name:
            found.append(inside)
    return sorted(found)
