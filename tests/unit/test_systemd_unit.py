"""deploy/systemd/vllm-sentinel.service: the hardening docs/security.md promises, as written.

The unit is read as systemd reads it (``Key=Value`` lines per ``[Section]``, a key may repeat),
checked option by option, and rated by the real ``systemd-analyze security --offline=true``
(skipped locally without it, a failure under ``CI=true``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_binary

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "vllm-sentinel.service"
MAX_EXPOSURE = 3.0
"""systemd-analyze's overall exposure must stay at most this (systemd 252 rates the unit 2.3)."""

_EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+(?:\.\d+)?) (\w+)")


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Section → key → every value the key was given, in order (systemd keys may repeat).

    Comments (``#``, ``;``) and blank lines are skipped; a line ending in ``\\`` continues.

    Raises:
        ValueError: a line outside a section, or neither a section nor ``Key=Value``.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, equals, value = line.partition("=")
        if current is None or not equals or not key.strip():
            raise ValueError(f"{path}:{number}: not a section or Key=Value: {raw!r}")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def overall_exposure(unit_file: Path) -> tuple[float, str]:
    """Run ``systemd-analyze security --offline=true`` on ``unit_file``: (exposure, rating)."""
    binary = require_binary("systemd-analyze")
    result = subprocess.run(
        [binary, "security", "--offline=true", "--no-pager", unit_file.name],
        cwd=unit_file.parent,
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = result.stdout.decode("utf-8", errors="replace")
    match = _EXPOSURE.search(output)
    assert match is not None, (result.returncode, output[-2000:], result.stderr.decode()[-2000:])
    return float(match.group(1)), match.group(2)


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    """The ``[Service]`` section of the shipped unit."""
    return read_unit(UNIT)["Service"]


def last(service: dict[str, list[str]], key: str) -> str:
    """The value systemd uses for a single-valued key: the last one given."""
    assert key in service, f"{key}= is not set in {UNIT.name}"
    return service[key][-1]


class TestOptions:
    """Each hardening option docs/security.md reviews is set as the review says."""

    def test_runs_as_an_unprivileged_user_in_the_journal_group(
        self, service: dict[str, list[str]]
    ) -> None:
        """A named system user and group, never root; journal access through its group only."""
        user, group = last(service, "User"), last(service, "Group")
        assert user and user not in {"root", "0"}
        assert group and group not in {"root", "0"}
        supplementary = " ".join(service.get("SupplementaryGroups", [])).split()
        assert "systemd-journal" in {group, *supplementary}
        assert last(service, "CapabilityBoundingSet") == ""
        assert last(service, "AmbientCapabilities") == ""

    @pytest.mark.parametrize(
        ("key", "allowed"),
        [
            ("NoNewPrivileges", {"yes"}),
            ("ProtectSystem", {"strict"}),
            ("ProtectHome", {"yes", "read-only"}),
            ("PrivateTmp", {"yes"}),
            ("Restart", {"on-failure"}),
        ],
    )
    def test_hardening_option(
        self, service: dict[str, list[str]], key: str, allowed: set[str]
    ) -> None:
        """The option is set to one of the reviewed values."""
        assert last(service, key) in allowed

    def test_state_directory_holds_the_cursors(self, service: dict[str, list[str]]) -> None:
        """Cursors need the one writable place ProtectSystem=strict leaves: StateDirectory=."""
        assert last(service, "StateDirectory") == "vllm-sentinel"

    def test_reader_handles_repeats_and_continuations(self, tmp_path: Path) -> None:
        """The reader keeps every value of a repeated key and joins continued lines."""
        unit = tmp_path / "x.service"
        unit.write_text("# c\n[Service]\nExecStartPre=/bin/a \\\n  -b\nExecStartPre=/bin/c\n")
        assert read_unit(unit) == {"Service": {"ExecStartPre": ["/bin/a -b", "/bin/c"]}}
        unit.write_text("User=root\n")
        with pytest.raises(ValueError, match="not a section"):
            read_unit(unit)


class TestSystemdAnalyze:
    """The real analyzer's rating of a copy of the unit file."""

    def test_exposure_is_at_most_three(self, tmp_path: Path) -> None:
        """``systemd-analyze security --offline=true`` rates the unit OK, at most 3.0."""
        copy = tmp_path / UNIT.name
        shutil.copyfile(UNIT, copy)
        exposure, rating = overall_exposure(copy)
        assert exposure <= MAX_EXPOSURE, f"exposure {exposure} {rating}"

    def test_the_check_can_fail(self, tmp_path: Path) -> None:
        """The same unit without its hardening options is rated above the bound."""
        keep = ("Type=", "User=", "Group=", "ExecStart=", "Restart=", "[", "Description=")
        lines = UNIT.read_text(encoding="utf-8").splitlines()
        bare = tmp_path / UNIT.name
        bare.write_text("\n".join(line for line in lines if line.startswith(keep)) + "\n")
        exposure, _rating = overall_exposure(bare)
        assert exposure > MAX_EXPOSURE
