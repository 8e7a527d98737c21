"""docs/architecture.md matches the tree: every path it names exists, every module of flashbuild/ is
in its stage diagram (under the right stage), every subpackage is a stage there, and every kernel
header is described. A module added, moved or deleted without the doc fails here; so does a module
past 600 lines (the size the doc's "small modules" means)."""

from __future__ import annotations

import re

from helpers import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "flashbuild"
# what a path in backticks looks like: a file of ours by its suffix, or a folder ending in /
PATH = re.compile(r"^[\w.*<>/-]+(\.(py|h|cpp|j2|toml|md)|/)$")


def diagram() -> list[str]:
    """The lines of the stage diagram: the first fenced block."""
    text = DOC.read_text()
    start = text.index("```\n") + 4
    return text[start:text.index("```\n", start)].splitlines()


def diagram_modules() -> set[str]:
    """Paths (relative to flashbuild/) of the modules the diagram's left column lists, each under the
    stage whose header it follows (` 3 pipeline/ ...`; `leaves` and `top` are flashbuild/ itself)."""
    found, here = set(), ""
    for line in diagram():
        left = line.split("|")[0]
        head = re.match(r"^\s*\d\s+(\S+)", left)
        if head:
            here = head.group(1) if head.group(1).endswith("/") else ""
        found |= {here + name for name in re.findall(r"\b([\w]+\.py)\b", left)}
    return found


def named_paths() -> set[str]:
    """Every path-like text in backticks, and every path with a folder in the diagram's right column."""
    text = DOC.read_text()
    names = {t for t in re.findall(r"`([^`\n]+)`", text) if PATH.match(t)}
    for line in diagram():
        if "|" in line:
            names |= {t for t in re.findall(r"[\w.*/-]+", line.split("|", 1)[1]) if "/" in t and PATH.match(t)}
    return names


def resolves(name: str) -> bool:
    pattern = re.sub(r"<[^>]+>", "*", name).rstrip("/")
    if "/" not in name:  # a bare file name: a header of a kernel family or a module of the package
        return any(REPO.glob(f"kernels/**/{pattern}")) or any(PACKAGE.glob(f"**/{pattern}"))
    return any(any(root.glob(pattern)) for root in (REPO, PACKAGE, REPO / "kernels"))


def test_every_path_the_doc_names_exists():
    generated = {n for n in named_paths() if "/" not in n and "<" in n}  # <variant>_kernel.cu: a build's file
    missing = sorted(n for n in named_paths() - generated if not resolves(n))
    assert not missing, f"docs/architecture.md names paths that are not in the tree: {missing}"


def test_every_module_is_in_the_stage_diagram_under_its_stage():
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" or p.parent == PACKAGE}
    listed = diagram_modules()
    assert not sorted(modules - listed), f"modules docs/architecture.md does not describe: {sorted(modules - listed)}"
    assert not sorted(listed - modules), f"docs/architecture.md lists modules that are gone: {sorted(listed - modules)}"


def test_every_subpackage_is_a_stage_of_the_diagram():
    stages = {m.split("/")[0] for m in diagram_modules() if "/" in m}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert stages == packages


def test_every_kernel_file_and_folder_is_described():
    text = DOC.read_text()
    quoted = set(re.findall(r"`([^`\n]+)`", text))
    files = [p for p in (REPO / "kernels").rglob("*") if p.is_file()]
    undescribed = [str(p.relative_to(REPO)) for p in files
                   if p.name not in quoted and not any(q.endswith("/" + p.name) for q in quoted)]
    assert not undescribed, f"kernel files docs/architecture.md does not describe: {undescribed}"
    folders = {p.name + "/" for p in (REPO / "kernels").iterdir() if p.is_dir()}
    assert folders <= quoted, f"kernel folders docs/architecture.md does not name: {sorted(folders - quoted)}"


def test_the_checks_catch_a_missing_path_and_an_unlisted_module():
    assert not resolves("pipeline/no_such_module.py") and not resolves("no_such_header.h")
    assert resolves("pipeline/plan.py") and resolves("configs/profiles/releases/<profile>/*.toml")
    assert "pipeline/plan.py" in diagram_modules() and "commands/options.py" in diagram_modules()
    assert "build/plan.py" not in diagram_modules()


def test_no_module_is_past_600_lines():
    """Modules small enough to read in one sitting: one past 600 lines is split by concern."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"modules past 600 lines: {long}"
