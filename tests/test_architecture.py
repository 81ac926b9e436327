"""The layering of docs/architecture.md: core <- driver <- plugins, imports only downward
(function-level imports included), and no import circle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> installed package (pyproject.toml maps solvers/ and extensions/ into forestpy)
PACKAGES = {"forestpy": "forestpy", "solvers": "forestpy.solvers",
            "extensions": "forestpy.extensions"}
CORE, DRIVER, PLUGINS = 0, 1, 2
DRIVER_MODULES = ("forestpy.simulation", "forestpy.callbacks", "forestpy.io",
                  "forestpy.cli", "forestpy.parallel")
# The package facade imports the driver and registers the built-in plugins by name: it
# is the composition root, above every layer.
COMPOSITION_ROOT = "forestpy"


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([package, *parts])] = path
    return mods


MODULES = _modules()


def layer(module: str) -> int:
    if module.startswith(("forestpy.solvers", "forestpy.extensions")):
        return PLUGINS
    if module.startswith(DRIVER_MODULES):
        return DRIVER
    return CORE


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> dict[str, int]:
    """The forestpy modules that ``module`` imports anywhere in its body -> a line."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        for name in names:
            target = _known(name)
            if target is not None and target != module:
                out.setdefault(target, node.lineno)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def test_the_tree_is_found():
    assert len(MODULES) > 60 and "forestpy.simulation" in MODULES
    assert "forestpy.solvers.clawpack.solver" in MODULES


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != COMPOSITION_ROOT))
def test_imports_only_downward(module):
    upward = [f"line {line}: {target}" for target, line in sorted(GRAPH[module].items())
              if layer(target) > layer(module) and target != COMPOSITION_ROOT]
    assert not upward, f"{module} (layer {layer(module)}) imports upward: {upward}"


def test_no_module_imports_the_composition_root():
    """``from forestpy import X`` inside the package runs the facade from the inside."""
    users = [m for m, targets in GRAPH.items() if COMPOSITION_ROOT in targets
             and m != COMPOSITION_ROOT]
    assert not users, users


def test_no_import_circle():
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    counter = iter(range(10**9))

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_a_violation():
    """The rules above fail on the kind of import they forbid."""
    assert layer("forestpy.solvers.clawpack.solver") > layer("forestpy.simulation")
    assert layer("forestpy.simulation") > layer("forestpy.patches.ghost_plan")
    assert "forestpy.patches.ghost_plan" in GRAPH["forestpy.patches.surface_ghosts"]
