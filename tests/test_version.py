"""The release is written once, in flashbuild/version.py: pyproject.toml reads it from there
(setuptools' dynamic version), and no other module of the package assigns a version of its own."""

from __future__ import annotations

import ast

from helpers import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_pyproject_takes_the_version_from_the_leaf_module():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"], "pyproject.toml spells the version: take it from flashbuild/version.py"
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, name = attr.rsplit(".", 1)
    import importlib

    assert getattr(importlib.import_module(module), name) == __import__("flashbuild").__version__
    assert module == "flashbuild.version"


def test_only_version_py_assigns_a_version():
    assigning = []
    for path in sorted((REPO / "flashbuild").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            if any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets):
                assigning.append(str(path.relative_to(REPO)))
    assert assigning == ["flashbuild/version.py"]
