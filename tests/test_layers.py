"""The package's stages import downwards only (docs/architecture.md): selection -> sources -> pipeline
(the build stage) -> debug / ci -> the top-level API and CLI (cli.py and its commands/). A module may
import from its own stage and the stages above it; the leaves (env.py, reference.py, safe_io.py,
version.py: they import nothing of flashbuild but errors.py, which imports nothing at all) serve every
stage. Imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "flashbuild"

# stage -> rank; a module of rank r may import modules of rank <= r (debug and ci: not each other).
RANKS = {"errors": -1, "env": 0, "reference": 0, "safe_io": 0, "version": 0, "selection": 1, "sources": 2, "pipeline": 3, "debug": 4, "ci": 4}
TOP = 5  # api, cli, doctor, __init__, __main__


def stage_of(module: str) -> str:
    """'flashbuild.pipeline.plan' -> 'pipeline'; 'flashbuild.api' -> 'api'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def rank(stage: str) -> int:
    return RANKS.get(stage, TOP)


def imported_modules(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module name) of every flashbuild import in the file."""
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from ..pipeline import builder` -> flashbuild.pipeline; `from .. import env` -> flashbuild.env
            names = [target] if node.module else [f"{target}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names if name.startswith("flashbuild")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("flashbuild")]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_imports_flow_down_the_stages(path):
    own = stage_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    wrong = []
    for line, target in imported_modules(path):
        other = stage_of(target)
        if other == "__init__" or other == own:
            continue
        if rank(other) > rank(own) or (rank(other) == rank(own) and rank(own) != TOP):
            wrong.append(f"line {line}: {target} (stage {other}) from stage {own}")
    assert not wrong, f"{path.relative_to(PACKAGE.parent)} imports up or across the stages: " + "; ".join(wrong)


def test_the_leaves_import_nothing_of_flashbuild():
    assert imported_modules(PACKAGE / "errors.py") == []
    for leaf in ("env.py", "reference.py", "safe_io.py", "version.py"):
        assert {name for _, name in imported_modules(PACKAGE / leaf)} <= {"flashbuild.errors"}, leaf


def test_the_check_resolves_relative_imports(tmp_path):
    """`from ..pipeline import builder` in a selection module reads as flashbuild.pipeline: caught."""
    module = tmp_path / "flashbuild" / "selection" / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text("from .. import env\nfrom ..pipeline import builder\n")
    names = [name for _, name in imported_modules(module, root=tmp_path / "flashbuild")]
    assert names == ["flashbuild.env", "flashbuild.pipeline"]
    assert rank(stage_of(names[1])) > rank(stage_of("flashbuild.selection.bad"))
