"""The package as pip builds it: a quiet build, what the wheel holds, editable installs stay pure.

Builds run on a copy of the tracked tree (``tests/support/packaging.py``), never in the
checkout, with build isolation as a user's ``pip install .`` has it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import BuiltPackage
from tests.support.packaging import ROOT, backend_output, build_env, pip_env, tracked_tree

pytestmark = pytest.mark.integration


@pytest.mark.xdist_group("built_package")  # the session's wheel is built once, on one worker
class TestWheel:
    def test_the_build_prints_no_warning(self, built_package: BuiltPackage) -> None:
        """setuptools prints no warning: SPDX license string, every package declared."""
        output = backend_output(built_package.log)
        assert "running bdist_wheel" in output
        noisy = [line for line in output.splitlines() if re.search(r"(?i)warn|deprecat|!!", line)]
        assert noisy == []

    def test_metadata_has_the_spdx_license(self, built_package: BuiltPackage) -> None:
        """Core metadata 2.4 carries License-Expression (PEP 639), not a License text."""
        with zipfile.ZipFile(built_package.wheel) as wheel:
            (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = wheel.read(name).decode()
        assert "License-Expression: Apache-2.0\n" in metadata
        assert "\nLicense: " not in metadata

    def test_the_wheel_carries_the_runbook_and_the_demo_logs(
        self, built_package: BuiltPackage
    ) -> None:
        """docs/runbook.md is copied in at build time; the demo's incidents and py.typed too."""
        with zipfile.ZipFile(built_package.wheel) as wheel:
            names = set(wheel.namelist())
            runbook = wheel.read("vllm_sentinel/serve/runbook.md").decode()
        assert runbook == (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
        incidents = {path.name for path in (ROOT / "vllm_sentinel" / "incidents").glob("*.jsonl")}
        assert {f"vllm_sentinel/incidents/{name}" for name in incidents} <= names
        assert "vllm_sentinel/py.typed" in names
        assert "vllm_sentinel/engine/catalog/failures.tsv" in names  # the failure catalog
        assert not [name for name in names if "__pycache__" in name]

    def test_an_installed_wheel_serves_its_own_runbook(
        self, built_package: BuiltPackage, tmp_path: Path
    ) -> None:
        """Installed elsewhere, read_runbook finds the packaged copy (no checkout around)."""
        target = tmp_path / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
             str(built_package.wheel)],
            check=True, capture_output=True, env=pip_env(), timeout=120,
        )  # fmt: skip
        probe = (
            "import vllm_sentinel.serve.runbook as r, pathlib; text = r.read_runbook(); "
            "print(pathlib.Path(r.__file__).parent / 'runbook.md'); print(len(text))"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=tmp_path,
            capture_output=True,
            env=build_env(PYTHONPATH=str(target)),
            check=True,
            timeout=60,
        )
        where, length = result.stdout.decode().split()
        assert Path(where).is_relative_to(target) and Path(where).is_file()
        assert int(length) == len((ROOT / "docs" / "runbook.md").read_text(encoding="utf-8"))


class TestEditableInstall:
    def test_leaves_no_compiled_module_in_the_tree(self, tmp_path: Path) -> None:
        """`pip install -e .` without VLLM_SENTINEL_PURE compiles nothing into the sources."""
        tree = tracked_tree(tmp_path / "tree")
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
             "-v", "--no-deps", "-e", str(tree)],
            capture_output=True, env=pip_env(), timeout=600, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        compiled = [
            path.relative_to(tree)
            for pattern in ("*.so", "*.c", "*.pyd")
            for path in tree.rglob(pattern)
        ]
        assert compiled == []
        probe = (
            "import importlib.util as u; print(u.find_spec('vllm_sentinel.engine.tracker').origin)"
        )
        module = subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe],
            cwd=tmp_path, capture_output=True, check=True, env=build_env(), timeout=60,
        ).stdout.decode().strip()  # fmt: skip
        assert module == str(tree / "vllm_sentinel" / "engine" / "tracker.py")
