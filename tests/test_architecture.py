"""The floors, enforced by package (docs/architecture.md).

``engine/`` is the pure core: it imports no I/O, async, clock or exporter library and nothing of
the package outside it, and holds no mutable module state. Inside it, ``decode/`` imports nothing
of the engine, ``catalog/`` only ``decode/``. ``sources/`` and ``state/`` import no ``serve/``
and not each other; ``serve/`` imports no ``sources/``. No subpackage imports the commands and
wiring at the top (``cli``, ``daemon``, ``monitor``, ``replay``, ``demo``, ``config``,
``init_config``); ``errors`` and ``log`` are the two top-level modules every edge may use. There
is no import circle between modules.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import vllm_sentinel

PACKAGE = Path(vllm_sentinel.__file__).parent
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py"
)
CORE = [name for name in MODULES if name.startswith("engine")]
# parsers of the edges' own formats, pure like the core though they live beside their source
PURE_EDGES = ["sources.nvidia_smi", "sources.attribution", "serve.page", "serve.readiness"]
# the top level: commands and wiring, plus the two modules shared by every floor
SHARED = {"errors", "log", "__init__"}
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
    "os",
    "pathlib",
    "shutil",
    "tempfile",
}
MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
# (importer's floor, floors it must not import); a floor is a module's first dotted part
NOT_ALLOWED = {
    "engine": {"sources", "state", "serve"},
    "sources": {"state", "serve"},
    "state": {"sources", "serve"},
    "serve": {"sources"},
}
FLOORS = {"engine", "sources", "state", "serve"}


def _path(module: str) -> Path:
    base = PACKAGE.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text())


def _imports(module: str) -> Iterator[str]:
    """Every module name ``module`` imports, at any depth (lazy and TYPE_CHECKING imports too)."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            if node.module == "vllm_sentinel" or node.module.startswith("vllm_sentinel."):
                # ``from vllm_sentinel.engine import tracker`` imports a module too
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    if candidate.removeprefix("vllm_sentinel.") in MODULES:
                        yield candidate


def _internal(module: str) -> set[str]:
    """The package's modules that ``module`` imports, without the ``vllm_sentinel.`` prefix."""
    found = set()
    for name in _imports(module):
        if name.startswith("vllm_sentinel."):
            inner = name.removeprefix("vllm_sentinel.")
            while inner and inner not in MODULES:
                inner = inner.rpartition(".")[0]
            if inner:
                found.add(inner)
    return found


def _floor(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_every_module_is_in_a_floor_or_is_a_command() -> None:
    """A newcomer can tell the floors from the tree: the top holds only commands and wiring."""
    top = {name for name in MODULES if "." not in name} - FLOORS
    assert top == {
        "__init__",
        "cli",
        "config",
        "daemon",
        "demo",
        "errors",
        "init_config",
        "log",
        "monitor",
        "replay",
        "watch",
    }


@pytest.mark.parametrize("module", CORE + PURE_EDGES)
def test_core_imports_no_io_library(module: str) -> None:
    """The core (and the edges' pure parsers) import no I/O, async, clock or exporter library."""
    for name in _imports(module):
        assert name.split(".")[0] not in FORBIDDEN, f"{module} imports {name}"


@pytest.mark.parametrize("module", CORE)
def test_core_imports_nothing_outside_the_engine(module: str) -> None:
    """The engine imports only the engine (and errors): never a source, a store, serve, the top."""
    outside = {name for name in _internal(module) if _floor(name) != "engine"} - {"errors"}
    assert not outside, f"{module} imports {sorted(outside)}"


@pytest.mark.parametrize("module", [m for m in CORE if m.startswith("engine.decode")])
def test_decode_imports_nothing_that_decides(module: str) -> None:
    """Decoding is the first layer: it imports no catalog and no deciding module."""
    inner = {name for name in _internal(module) if not name.startswith("engine.decode")}
    assert inner <= {"engine"}, f"{module} imports {sorted(inner)}"


@pytest.mark.parametrize("module", [m for m in CORE if m.startswith("engine.catalog")])
def test_catalog_imports_only_decode(module: str) -> None:
    """The catalogs are data over the decoded line: they import ``decode/`` and each other."""
    inner = {
        name
        for name in _internal(module)
        if not name.startswith(("engine.decode", "engine.catalog"))
    }
    assert inner <= {"engine"}, f"{module} imports {sorted(inner)}"


@pytest.mark.parametrize("module", [m for m in MODULES if _floor(m) in FLOORS])
def test_floors_import_no_command_and_no_floor_above(module: str) -> None:
    """Sources and state import no serve; serve no source; no floor imports the top's commands."""
    for name in _internal(module):
        floor = _floor(name)
        if floor in FLOORS:
            assert floor not in NOT_ALLOWED[_floor(module)], f"{module} imports {name}"
        else:
            assert name in SHARED, f"{module} imports the command/wiring module {name}"


def test_no_import_circle() -> None:
    """The module import graph is acyclic (type-only and lazy imports included)."""
    graph = {module: _internal(module) - {module} for module in MODULES}
    # a package's __init__ importing its own modules is not a circle of design
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for module in MODULES:
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", CORE + PURE_EDGES)
def test_core_has_no_mutable_module_state(module: str) -> None:
    """No module-level dict/list/set literals: tables are tuples or read-only mappings."""
    for node in _tree(module).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, MUTABLE):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if ast.unparse(target) == "__all__":
                continue
            pytest.fail(f"{module}: module-level mutable {ast.unparse(target)}")


@pytest.mark.parametrize("module", CORE + PURE_EDGES)
def test_core_never_reads_the_clock(module: str) -> None:
    """The core is given time; it never calls now() or time()."""
    source = _path(module).read_text()
    assert "datetime.now" not in source and "time.time(" not in source, module


def test_the_layout_checks_can_fail() -> None:
    """The import walker sees ``from package import module`` and lazy imports (self-check)."""
    assert "engine.tracker" in _internal("engine.report")
    assert "serve.web_config" in _internal("config")  # imported inside a function
    assert "engine" not in _internal("engine.tracker")


def _all_modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="vllm_sentinel."):
        if not info.ispkg and not info.name.rpartition(".")[2].startswith("_"):
            found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("name", _all_modules())
def test_public_surface_is_declared(name: str) -> None:
    """Each module's ``__all__`` lists exactly its public classes and functions."""
    module = importlib.import_module(name)
    declared = set(getattr(module, "__all__", ()))
    defined = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
        and (isinstance(value, type) or callable(value))
    }
    assert defined <= declared, f"{name}: public but not in __all__: {sorted(defined - declared)}"
    missing = {attr for attr in declared if not hasattr(module, attr)}
    assert not missing, f"{name}: __all__ names missing: {sorted(missing)}"


def test_every_subpackage_says_what_it_may_import() -> None:
    """Each floor's docstring names what lives there and what it may import."""
    for floor in [*sorted(FLOORS), "engine.decode", "engine.catalog"]:
        doc = ast.get_docstring(_tree(floor)) or ""
        assert "May import" in doc, floor
