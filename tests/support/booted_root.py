"""A throwaway root booted with systemd as PID 1: where the documented install runs for real.

This machine (and CI's) runs without systemd as PID 1, so ``systemctl enable --now`` cannot
run on it directly. ``BootedRoot`` makes a root that can, with the real tools only:

* an **overlay** of this machine's ``/`` (``mount -t overlay``): the same Debian, with its
  ``python3-venv``, ``useradd``, ``systemd``, but every write goes to a throwaway upper
  directory, so the host's ``/etc/passwd``, ``/opt`` and ``/etc/systemd`` stay untouched;
* new **mount, PID, network, UTS and IPC namespaces** (``unshare``): systemd is PID 1 there
  and boots ``basic.target`` in about a quarter of a second (journald, dbus-less), logging
  to its journal (``--log-target=journal``: PID 1's own entries about units, ``Started``,
  ``Main process exited``, ``Scheduled restart job``, are there as on a host); the
  network namespace has only its own loopback, so the daemon's ``127.0.0.1:9842`` cannot meet
  anything on the host, and nothing inside reaches the network (pip installs from a
  wheelhouse: ``binds``);
* commands run inside with ``nsenter`` into all of those namespaces and systemd's root.

Everything is gone when PID 1 of the namespace is killed (``stop``): its processes with it,
its mounts with the namespace; the upper directory stays for inspection (``upper``) until the
test's ``tmp_path`` is removed. Needs root (``CAP_SYS_ADMIN``) and a filesystem for the upper
directory that overlayfs accepts (ext4, xfs, tmpfs — not overlayfs itself).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BootError", "BootedRoot"]

_BOOT_SCRIPT = r"""set -euo pipefail
merged="$1"; upper="$2"; work="$3"; shift 3
mount -t overlay overlay -o "lowerdir=/,upperdir=$upper,workdir=$work" "$merged"
mount -t proc proc "$merged/proc"
mount -t sysfs sysfs "$merged/sys"
mount -t tmpfs tmpfs "$merged/sys/fs/cgroup"
mount -t cgroup2 cgroup2 "$merged/sys/fs/cgroup"
mount --rbind /dev "$merged/dev"
mount -t tmpfs tmpfs "$merged/run"
mount -t tmpfs tmpfs "$merged/tmp"
while [ "$#" -gt 0 ]; do  # binds: INSIDE HOST pairs, read-only
    mkdir -p "$merged$1"
    mount --bind "$2" "$merged$1"
    mount -o remount,bind,ro "$merged$1"
    shift 2
done
exec chroot "$merged" /usr/bin/env -i container=vllm-sentinel-test \
    /lib/systemd/systemd --system --unit=basic.target --log-target=journal --show-status=0
"""

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class BootError(RuntimeError):
    """The root could not be booted (the message ends with the boot log's tail)."""


class BootedRoot:
    """An overlay of ``/`` with systemd as PID 1 in its own namespaces.

    Args:
        workdir: an empty directory for the overlay's upper, work and mount directories and
            the boot log.
        binds: paths inside the root → host directories mounted there read-only.
    """

    def __init__(self, workdir: Path, binds: Mapping[str, Path] | None = None) -> None:
        self.workdir = workdir
        self.upper = workdir / "upper"
        self._merged = workdir / "merged"
        self._work = workdir / "work"
        self._log = workdir / "boot.log"
        self._binds = dict(binds or {})
        self._unshare: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Boot, and return once ``systemctl is-system-running`` says running or degraded.

        Raises:
            BootError: systemd did not come up within ``timeout`` seconds.
        """
        for directory in (self.upper, self._merged, self._work):
            directory.mkdir(parents=True, exist_ok=True)
        script = self.workdir / "boot.sh"
        script.write_text(_BOOT_SCRIPT, encoding="utf-8")
        pairs = [str(part) for inside, host in self._binds.items() for part in (inside, host)]
        with self._log.open("wb") as log:
            self._unshare = subprocess.Popen(
                [
                    "unshare", "--mount", "--pid", "--net", "--uts", "--ipc", "--fork",
                    "--propagation", "private",
                    "bash", str(script), str(self._merged), str(self.upper), str(self._work),
                    *pairs,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.pid is None:
            self.pid = self._systemd_pid()
            self._check_alive(deadline)
        state = ""
        while state not in ("running", "degraded"):
            result = self.run(["systemctl", "is-system-running"], timeout=10)
            state = result.stdout.decode().strip()
            self._check_alive(deadline)

    def _systemd_pid(self) -> int | None:
        """The namespace's PID 1 as seen from here, once it has become systemd."""
        assert self._unshare is not None
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children")
        try:
            pids = children.read_text().split()
            if pids and Path(f"/proc/{pids[0]}/comm").read_text().strip() == "systemd":
                return int(pids[0])
        except OSError:
            pass
        return None

    def _check_alive(self, deadline: float) -> None:
        assert self._unshare is not None
        if self._unshare.poll() is not None or time.monotonic() > deadline:
            self.stop()
            tail = self._log.read_text(errors="replace")[-3000:]
            raise BootError(f"systemd did not boot in the throwaway root:\n{tail}")
        time.sleep(0.05)

    def run(
        self,
        argv: list[str],
        *,
        cwd: str = "/",
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        stdin: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` as root inside the root (all its namespaces), in ``cwd`` there.

        The environment is ``PATH``, ``HOME=/root``, ``LANG=C.UTF-8`` plus ``env``.
        """
        assert self.pid is not None, "start() first"
        environment = {"PATH": _PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
        # nsenter's -w would open the path on this side of the chroot: cd inside instead
        inside = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", "-r", "-w", "--", *inside],
            input=stdin,
            capture_output=True,
            env=environment,
            timeout=timeout,
            check=False,
        )

    def path(self, inside: str) -> Path:
        """Where a path of the root is written (the upper layer; lower files are not there)."""
        return self.upper / inside.lstrip("/")

    def stop(self) -> None:
        """Kill the namespace's PID 1 (and so everything in it) and wait for ``unshare``."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.pid = None
        if self._unshare is not None:
            try:
                self._unshare.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._unshare.pid, signal.SIGKILL)
                self._unshare.wait(timeout=30)
            self._unshare = None
