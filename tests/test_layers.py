"""Dependencies run downhill only: the layers of docs/architecture.md, read from the code's imports.

Every import of a daskclust module -- at module level or inside a function -- is an arrow from
the importing unit (a top-level module or package of ``daskclust``) to the imported one. An
arrow may only point to a lower layer; units of one layer do not import each other; and no
group of modules imports itself round a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "daskclust"

LAYERS = (
    ("lazy",),
    ("errors", "names", "display", "versions", "blas"),
    ("kernels", "io", "threads"),
    ("data", "models", "persistence"),
    ("engine", "report", "datasets"),
    ("search", "seeding"),
    ("em", "transforms"),
    ("fit",),
    ("estimators",),
    ("__init__",),
    ("bench",),
    ("cli",),
    ("__main__",),
)
"""Bottom first; docs/architecture.md ("Layers") draws the same."""

LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[str, int]]:
    """The daskclust modules ``path`` imports (absolute names) with their line numbers."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append((target, node.lineno))
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]  # submodules by name
    return [(target, line) for target, line in found if target.split(".")[0] == "daskclust"]


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(target: str) -> str | None:
    """The module ``target`` names (``pkg.mod.attr`` -> ``pkg.mod``), or None."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def arrows() -> dict[str, set[str]]:
    graph = {module: set() for module in MODULES}
    for module, path in MODULES.items():
        for target, _ in imported(path):
            resolved = resolve(target)
            if resolved is not None and resolved != module:
                graph[module].add(resolved)
    return graph


def test_every_unit_has_a_layer():
    missing = sorted({unit(module) for module in MODULES} - set(LAYER))
    assert not missing, f"add {missing} to LAYERS (and to docs/architecture.md's layers)"


def test_imports_run_downhill_only():
    uphill = []
    for module, path in MODULES.items():
        for target, line in imported(path):
            resolved = resolve(target)
            if resolved is None:
                continue
            source, sink = unit(module), unit(resolved)
            if source != sink and LAYER[sink] >= LAYER[source]:
                uphill.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {resolved} "
                              f"({source}, layer {LAYER[source]} -> {sink}, layer {LAYER[sink]})")
    assert not uphill, "imports that do not run downhill:\n" + "\n".join(uphill)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_circles_of_modules():
    graph = arrows()
    # a package's __init__ re-exporting its modules is not a circle of the code's logic
    for module in graph:
        if MODULES[module].name == "__init__.py":
            continue
        graph[module] = {t for t in graph[module] if not (MODULES[t].name == "__init__.py" and
                                                          module.startswith(t + "."))}
    assert not circles(graph), circles(graph)


def append_to_source(monkeypatch, target: Path, line: str) -> None:
    """Make the checks read ``target`` with ``line`` appended (after a blank line), the file untouched."""
    original = Path.read_text

    def read_text(self, encoding=None):
        text = original(self, encoding=encoding)
        return text + f"\n{line}\n" if self == target else text

    monkeypatch.setattr(Path, "read_text", read_text)


def test_the_checks_see_an_uphill_import_and_a_circle(monkeypatch):
    """The rules are not vacuous: an engine module importing the estimators is caught, and so is
    the circle it closes (the estimators import the engine)."""
    append_to_source(monkeypatch, PACKAGE / "engine" / "engine.py", "from ..estimators.base import TruncatedEMEstimator")
    with pytest.raises(AssertionError, match=r"engine/engine.py:\d+ imports daskclust.estimators.base"):
        test_imports_run_downhill_only()
    with pytest.raises(AssertionError, match="daskclust.engine.engine"):
        test_no_circles_of_modules()


STORE_MODULES = ("daskclust.io", "daskclust.data.sources", "daskclust.data.chunk_files", "daskclust.persistence")
"""The only modules that call zarr: the rules of every writer, the reading of users' inputs (and of their
chunk files), and the persistence package that owns every store daskclust writes."""


def zarr_importers() -> list[str]:
    """Where a module outside :data:`STORE_MODULES` imports zarr (path:line)."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(name.split(".")[0] == "zarr" for name in names) and not module.startswith(STORE_MODULES):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_only_the_store_modules_call_zarr():
    offending = zarr_importers()
    assert not offending, "zarr imported outside io.py, data/sources.py, data/chunk_files.py and persistence/:\n" + "\n".join(offending)


def test_the_zarr_check_sees_an_import(monkeypatch):
    """The rule is not vacuous: a search module importing zarr is caught."""
    target = PACKAGE / "search" / "pairs.py"
    n_lines = len(target.read_text(encoding="utf-8").splitlines())
    append_to_source(monkeypatch, target, "import zarr")
    assert zarr_importers() == [f"daskclust/search/pairs.py:{n_lines + 2}"]


def test_no_test_module_imports_another():
    """Shared helpers live in tests/conftest.py: importing a test module from another worked only
    when pytest had collected it first (its folder on sys.path), so it failed run alone."""
    offending = []
    for path in sorted(PACKAGE.parent.joinpath("tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offending += [f"{path.name}:{node.lineno} imports {name}" for name in names if name.startswith("test_")]
    assert not offending, offending
