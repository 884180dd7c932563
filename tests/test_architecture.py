"""The two floors: the core imports no I/O or async machinery and holds no mutable globals."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import vllm_sentinel

PACKAGE = Path(vllm_sentinel.__file__).parent
CORE = (
    "record",
    "line_buffer",
    "journal_json",
    "text_log",
    "paste",
    "vllm_line",
    "markers",
    "tracebacks",
    "causes",
    "failure_lines",
    "phases",
    "line_clock",
    "seen_cursors",
    "incarnation",
    "crash",
    "incarnations",
    "tracker",
    "counters",
    "stall",
    "eta",
    "attribution",
    "nvidia_smi",
    "snapshot",
    "health",
    "report",
    "readiness",
    "replay",
    "hints",
    "page",
)
FORBIDDEN = {
    "asyncio",
    "subprocess",
    "socket",
    "asyncssh",
    "pynvml",
    "prometheus_client",
    "threading",
    "http",
    "urllib",
    "structlog",
    "time",
}
MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text())


@pytest.mark.parametrize("module", CORE)
def test_core_imports_nothing_from_the_edges(module: str) -> None:
    """Core modules import no I/O, async, clock or exporter libraries, nor edge modules."""
    edges = {
        "transport",
        "journal",
        "gpu",
        "cursors",
        "history",
        "monitor",
        "metrics",
        "exporter",
        "http",
        "daemon",
        "cli",
        "config",
        "log",
        "demo",
    }
    for node in ast.walk(_tree(module)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{module} imports {name}"
            if top == "vllm_sentinel":
                assert name.split(".")[1] not in edges, f"{module} imports edge {name}"


@pytest.mark.parametrize("module", CORE)
def test_core_has_no_mutable_module_state(module: str) -> None:
    """No module-level dict/list/set literals: tables are tuples or read-only mappings."""
    for node in _tree(module).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, MUTABLE):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if ast.unparse(target) == "__all__":
                continue
            pytest.fail(f"{module}: module-level mutable {ast.unparse(target)}")


def test_core_never_reads_the_clock() -> None:
    """The core is given time; it never calls now() or time()."""
    for module in CORE:
        source = (PACKAGE / f"{module}.py").read_text()
        assert "datetime.now" not in source and "time.time(" not in source, module


@pytest.mark.parametrize("info", list(pkgutil.iter_modules([str(PACKAGE)])), ids=lambda i: i.name)
def test_public_surface_is_declared(info: pkgutil.ModuleInfo) -> None:
    """Each module's ``__all__`` lists exactly its public classes and functions."""
    if info.name.startswith("_") or info.ispkg:
        return
    module = importlib.import_module(f"vllm_sentinel.{info.name}")
    declared = set(getattr(module, "__all__", ()))
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
        and (isinstance(value, type) or callable(value))
    }
    assert defined <= declared, (
        f"{info.name}: public but not in __all__: {sorted(defined - declared)}"
    )
    missing = {name for name in declared if not hasattr(module, name)}
    assert not missing, f"{info.name}: __all__ names missing: {sorted(missing)}"
