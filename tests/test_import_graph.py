"""The package's import graph has no circle, each room imports only rooms below it (cli/ at the top,
nothing imports it; core/ imports neither serving/ nor cli/), and core's own rooms import only downwards.

Every import counts, module-level or inside a function: a lazy import that closes a circle still ties
the two modules into one unit a reader must understand together. The graph is read from the source
with :mod:`ast` (nothing is imported), so the check is the same on every machine.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("plugin_api", "backends", "core", "conformance", "serving", "cli")
#: The packages whose graph has no circle. plugin_api's objects name each other in type hints only
#: (``if TYPE_CHECKING``), which this walk counts as imports.
CIRCLE_FREE = ("backends", "core", "conformance", "serving", "cli")
#: The rooms each package must not import: cli/ is the command line above everything, and the engine
#: knows nothing of the server or the command line that run it.
FORBIDDEN = {"plugin_api": ("cli",), "backends": ("cli",), "core": ("serving", "cli"),
             "conformance": ("cli",), "serving": ("cli",)}
#: core's rooms from the bottom up: a module imports only from its own room or a lower one. The
#: engine, its config and the shared errors/timeline/model config sit at core/'s top level.
ROOMS = ("models", "loading", "sched", "rank", "executors")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports. ``from X import Y`` counts ``X.Y`` when that is a
    module and ``X`` otherwise, as ``import X.Y`` counts ``X.Y``: the packages above a module (whose
    ``__init__`` the import also runs) are counted only when a name is taken from them."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name.removeprefix("anydev.") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = (node.module or "").removeprefix("anydev.")
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                found.add(target)
    return found


def import_graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    files = [p for package in packages for p in (ROOT / package).rglob("*.py")]
    known = {module_name(p) for p in files}
    return {module_name(p): imported_modules(p, known) for p in files}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (circle := visit(node)):
            return circle
    return None


def room_of(module: str) -> int | None:
    """The height of ``module``'s room in core (None: not in a room)."""
    parts = module.split(".")
    if parts[0] == "core" and len(parts) > 2 and parts[1] in ROOMS:
        return ROOMS.index(parts[1])
    return None


def test_no_import_circle():
    circle = find_circle(import_graph(CIRCLE_FREE))
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_no_room_imports_a_room_above_it():
    upward = [(module, target) for module, targets in import_graph().items() for target in targets
              if target.split(".")[0] in FORBIDDEN.get(module.split(".")[0], ())]
    assert not upward, "a room imports one above it: " + ", ".join(f"{a} -> {b}" for a, b in upward)


def test_core_rooms_import_only_their_own_room_or_lower():
    upward = [(module, target) for module, targets in import_graph().items() for target in targets
              if room_of(module) is not None and (room_of(target) or -1) > room_of(module)]
    assert not upward, "a lower room imports a higher one: " + ", ".join(f"{a} -> {b}" for a, b in upward)


def test_core_rooms_do_not_import_the_engine():
    up = {"core", "core.engine", "core.engine_config", "core.engine_startup", "core.step_loop", "core.step_padding",
          "core.micro_batches", "core.request_checks", "core.stats"}
    reaching = [(module, target) for module, targets in import_graph().items() for target in targets
                if room_of(module) is not None and target in up]
    assert not reaching, "a room imports the engine above it: " + ", ".join(f"{a} -> {b}" for a, b in reaching)


@pytest.mark.parametrize("graph, circle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, None),
])
def test_find_circle_finds_exactly_the_circles(graph, circle):
    assert find_circle(graph) == circle


def test_the_walk_reads_relative_and_lazy_imports():
    """A lazy relative import (inside a function) is an edge of the graph."""
    source = ROOT / "core" / "engine.py"
    assert "core.engine_config" in imported_modules(source, {"core.engine_config"})
    lazy = ROOT / "core" / "loading" / "checkpoint.py"
    assert "core.loading.hf_loader" in imported_modules(lazy, {"core.loading.hf_loader"})


def test_a_name_taken_from_a_package_is_an_edge_to_the_package_and_a_module_to_the_module():
    """``from anydev.core import SamplingParams`` reaches the engine package's ``__init__``;
    ``from anydev.core import interrupts`` reaches only the interrupts module."""
    known = {"core", "core.interrupts"}
    assert imported_modules(ROOT / "serving" / "protocol.py", known) == {"core"}
    assert imported_modules(ROOT / "core" / "exits.py", known) == {"core.interrupts"}


def test_the_graph_holds_the_command_line_and_what_it_imports():
    """The upward check sees cli/'s edges, the lazy ones to the server and the scaffold included."""
    assert {"cli.list_backends", "cli.scaffold", "serving.server", "core.exits"} <= import_graph()["cli.commands"]
