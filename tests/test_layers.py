"""The package's layers never reach up (docs/design.md, "Layers").

Every module of fusegrad is read with `ast`; each import, at module level or inside a function,
is an arrow from the importing module to the most specific module it names (`from . import lax`
points at fusegrad.lax, `from .. import __version__` at the package root). Importing a module
also runs the __init__.py of each package above it that is not already importing: the importer's
own packages (fusegrad itself, for every module) are, so those are no arrows, but
`from ..ir.core import Op` in fusegrad/tracer/ is an arrow to fusegrad.ir too. Imports under
`if TYPE_CHECKING:` are not arrows: they never run.

The graph must keep to the table below and have no cycle at all.
"""

from __future__ import annotations

import ast
from collections import namedtuple
from pathlib import Path

import pytest

PACKAGE = "fusegrad"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE

# The package's face: the modules that make the public API on top of the engine (the jit, the
# transforms, the NumPy and SciPy namespaces, ...). The value types below it, eager tensors
# (runtime/) and tracers (tracer/), never import it: what both need from it reaches them
# installed (fusegrad.numpy installs itself into tracer/methods.py, the mixin they share).
FACE = ["ROOT", "api", "transforms", "numpy", "scipy", "nn", "lax", "control_flow", "custom",
        "custom_checks", "testing", "__main__"]

# importer        may not import (names under fusegrad; ROOT is fusegrad/__init__.py itself;
#                 "not X" is anything in the package outside X)
RULES = [
    ("ir",         ["not ir"]),
    ("passes",     ["runtime", "codegen", "api", "transforms", "ROOT"]),
    ("tracer",     ["runtime", "codegen", "passes", *FACE]),
    ("runtime",    ["codegen", "passes", *FACE]),
    ("codegen",    ["ROOT", "api", "transforms", "passes.pipeline"]),
]

# Arrows allowed to cross a line while a move is under way, as (importer, imported) with the
# reason in a comment; test_pending_arrows_still_exist fails once an entry is stale. (Issue 13
# listed passes.simplify and codegen.compile -> runtime.interpreter here until `apply` moved to
# fusegrad/ir/evaluate.py.)
_PENDING: set[tuple[str, str]] = set()

Arrow = namedtuple("Arrow", "source target where")


# ---- reading the package ----------------------------------------------------------------------

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node that can run: all but those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def arrows_of(source: str, module: str, is_package: bool, modules: set[str],
              filename: str = "<string>") -> list[Arrow]:
    """The arrows out of one module, given its source and the names of all package modules."""
    arrows = {}                          # (source, target, where) -> line
    package = module if is_package else module.rpartition(".")[0]
    parts = module.split(".")
    importing = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}

    def add(target, node):
        if target not in modules or target == module:
            return
        where = f"{filename}:{node.lineno}"
        arrows[module, target, where] = node.lineno
        names = target.split(".")
        for i in range(1, len(names)):
            parent = ".".join(names[:i])
            if parent in modules and parent not in importing:
                arrows[module, parent, f"{where} (runs {parent}'s __init__)"] = node.lineno

    for node in _imports(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
            continue
        if node.level:
            base = package.split(".")
            base = base[:len(base) - node.level + 1]
            base = ".".join(base + ([node.module] if node.module else []))
        else:
            base = node.module
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            add(sub if sub in modules else base, node)
    return [Arrow(*key) for key, _ in sorted(arrows.items(), key=lambda item: item[1])]


def module_graph(root: Path = PACKAGE_DIR) -> dict[str, list[Arrow]]:
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for module, path in files.items():
        name = str(path.relative_to(root.parent))
        graph[module] = arrows_of(path.read_text(), module, path.name == "__init__.py",
                                  set(files), name)
    return graph


# ---- the checks ------------------------------------------------------------------------------

def _covers(pattern: str, module: str) -> bool:
    if pattern == "ROOT":
        return module == PACKAGE
    if pattern.startswith("not "):
        return not _covers(pattern[4:], module)
    name = f"{PACKAGE}.{pattern}"
    return module == name or module.startswith(name + ".")


def _rule_text(pattern: str) -> str:
    if pattern.startswith("not "):
        return f"may import only {pattern[4:]}"
    return "may not import " + ("the package root" if pattern == "ROOT" else pattern)


def violations(graph: dict[str, list[Arrow]], pending=frozenset()) -> list[str]:
    found = []
    for arrows in graph.values():
        for a in arrows:
            if (a.source, a.target) in pending:
                continue
            for layer, forbidden in RULES:
                if not _covers(layer, a.source):
                    continue
                for pattern in forbidden:
                    if _covers(pattern, a.target):
                        found.append(f"{a.where}: {a.source} -> {a.target}"
                                     f" ({layer} {_rule_text(pattern)})")
    return found


def cycles(graph: dict[str, list[Arrow]]) -> list[str]:
    """One cycle per strongly connected component of more than one module, as text."""
    succ = {m: sorted({a.target for a in arrows}) for m, arrows in graph.items()}
    where = {}
    for a in (a for arrows in graph.values() for a in arrows):
        where.setdefault((a.source, a.target), a.where)
    index, low, on_stack, stack, comps = {}, {}, set(), [], []

    def connect(v):                     # Tarjan; the package is small enough to recurse
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    for v in sorted(succ):
        if v not in index:
            connect(v)
    found = []
    for comp in comps:
        start = min(comp)
        path = _path_back(start, comp, succ)
        steps = [f"{a} -> {b} ({where[a, b]})" for a, b in zip(path, path[1:])]
        rest = sorted(comp - set(path))
        found.append("cycle: " + "; ".join(steps)
                      + (f" (and through {', '.join(rest)})" if rest else ""))
    return found


def _path_back(start, comp, succ):
    """The shortest path start -> ... -> start inside one component."""
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in succ.get(v, ()):
                if w == start:
                    path = []
                    while v is not None:
                        path.append(v)
                        v = parent[v]
                    return path[::-1] + [start]
                if w in comp and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a component without a cycle")


# ---- the tests -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    return module_graph()


def test_no_layer_reaches_up(graph):
    found = violations(graph, _PENDING)
    assert not found, "imports that cross a layer line:\n" + "\n".join(found)


def test_no_import_cycles(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_pending_arrows_still_exist(graph):
    arrows = {(a.source, a.target) for arrows in graph.values() for a in arrows}
    stale = sorted(_PENDING - arrows)
    assert not stale, f"these arrows are gone: remove them from _PENDING: {stale}"


def test_graph_is_read_the_way_the_rules_assume(graph):
    assert "fusegrad" in graph and "fusegrad.ir.core" in graph and "fusegrad.numpy" in graph
    assert sum(map(len, graph.values())) > 100
    api = {a.target for a in graph["fusegrad.api"]}
    assert "fusegrad.codegen" in api and "fusegrad.passes.pipeline" in api   # inside functions


def test_the_checks_catch_planted_violations():
    modules = {"fusegrad", "fusegrad.lax", "fusegrad.ir", "fusegrad.ir.core", "fusegrad.ir.dot",
               "fusegrad.runtime", "fusegrad.runtime.tensor", "fusegrad.codegen",
               "fusegrad.codegen.compile", "fusegrad.passes", "fusegrad.passes.pipeline"}
    core = arrows_of(
        "from typing import TYPE_CHECKING\n"
        "from . import dot\n"
        "if TYPE_CHECKING:\n"
        "    from ..runtime.tensor import Tensor\n"
        "def f():\n"
        "    from .. import lax\n", "fusegrad.ir.core", False, modules, "ir/core.py")
    assert [(a.target, a.where) for a in core] == [("fusegrad.ir.dot", "ir/core.py:2"),
                                                   ("fusegrad.lax", "ir/core.py:6")]
    compile_ = arrows_of("import numpy\nfrom .. import __version__\n"
                         "from ..passes.pipeline import optimize\n",
                         "fusegrad.codegen.compile", False, modules, "codegen/compile.py")
    assert [a.target for a in compile_] == ["fusegrad", "fusegrad.passes.pipeline",
                                            "fusegrad.passes"]     # passes/__init__.py runs too
    assert compile_[2].where == "codegen/compile.py:3 (runs fusegrad.passes's __init__)"
    dot = arrows_of("import fusegrad.ir.core\n", "fusegrad.ir.dot", False, modules, "ir/dot.py")
    graph = {"fusegrad.ir.core": core, "fusegrad.codegen.compile": compile_,
             "fusegrad.ir.dot": dot, "fusegrad.lax": []}
    found = violations(graph)
    assert found == [
        "ir/core.py:6: fusegrad.ir.core -> fusegrad.lax (ir may import only ir)",
        "codegen/compile.py:2: fusegrad.codegen.compile -> fusegrad"
        " (codegen may not import the package root)",
        "codegen/compile.py:3: fusegrad.codegen.compile -> fusegrad.passes.pipeline"
        " (codegen may not import passes.pipeline)",
    ]
    assert violations(graph, {("fusegrad.ir.core", "fusegrad.lax")}) == found[1:]
    assert cycles(graph) == ["cycle: fusegrad.ir.core -> fusegrad.ir.dot (ir/core.py:2);"
                             " fusegrad.ir.dot -> fusegrad.ir.core (ir/dot.py:1)"]


def test_the_value_types_may_not_import_the_face():
    """Eager tensors and tracers sit below fusegrad.numpy and the other public modules (the
    mixin they share imported fusegrad.numpy until issue 23 moved it to tracer/methods.py)."""
    graph = {"fusegrad.runtime.tensor": [
                 Arrow("fusegrad.runtime.tensor", "fusegrad.numpy.elementwise", "tensor.py:27"),
                 Arrow("fusegrad.runtime.tensor", "fusegrad.tracer.methods", "tensor.py:28")],
             "fusegrad.tracer.methods": [
                 Arrow("fusegrad.tracer.methods", "fusegrad.numpy", "methods.py:9")]}
    assert violations(graph) == [
        "tensor.py:27: fusegrad.runtime.tensor -> fusegrad.numpy.elementwise"
        " (runtime may not import numpy)",
        "methods.py:9: fusegrad.tracer.methods -> fusegrad.numpy (tracer may not import numpy)"]
