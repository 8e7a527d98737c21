"""No import cycles inside flashbuild, counting imports inside functions too: a stage that reads the
version imports the leaf flashbuild/version.py, never the package root (which imports the stages its
build() and load() drive). tests/test_layers.py checks the direction of imports between stages;
this checks there is no loop at all, which a lazy import can hide from it."""

from __future__ import annotations

import ast
import functools

from helpers import REPO

PACKAGE = REPO / "flashbuild"


@functools.lru_cache(maxsize=None)
def import_graph() -> dict[str, set[str]]:
    """module -> the flashbuild modules it imports (`from .. import env` is the submodule env;
    `from .. import __version__` is the package that defines the name)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, package) in modules.items():
        here = name if package else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(node.level - 1):
                    base = base.rsplit(".", 1)[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                if target and target.split(".")[0] == "flashbuild":
                    for alias in node.names:
                        sub = f"{target}.{alias.name}"
                        graph[name].add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name.split(".")[0] == "flashbuild"}
    return graph


def cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """One import path that leads from `start` back to it, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "flashbuild.pipeline.builder" in graph["flashbuild"]  # build() imports it inside the function
    assert "flashbuild.version" in graph["flashbuild.pipeline.plan"]


def test_no_module_imports_itself_back():
    graph = import_graph()
    cycles = {name: cycle for name in graph if (cycle := cycle_from(graph, name))}
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in list(cycles.values())[:5])
