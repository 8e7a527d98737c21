"""benchmarks/README.md indexes every study: each folder under benchmarks/ is a row of its Studies table,
and each row names a folder that exists. benchmarks/archive/ is an index only (superseded results and
tried patches live in git history, at the commit its README names), so nothing else may be added there."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"


def studies_table() -> list[str]:
    text = (BENCHMARKS / "README.md").read_text()
    section = text.split("\n## Studies\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)/` \|", section, re.M)


def test_every_study_folder_is_indexed_and_every_row_exists():
    folders = {p.name for p in BENCHMARKS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    rows = set(studies_table())
    assert not sorted(folders - rows), f"folders benchmarks/README.md does not index: {sorted(folders - rows)}"
    assert not sorted(rows - folders), f"benchmarks/README.md indexes folders that are gone: {sorted(rows - folders)}"


def test_the_archive_is_an_index_naming_the_commit_that_holds_its_files():
    tracked = sorted(str(p.relative_to(REPO)) for p in (BENCHMARKS / "archive").rglob("*") if p.is_file())
    assert tracked == ["benchmarks/archive/README.md"], f"files in benchmarks/archive/ besides its index: {tracked}"
    text = (BENCHMARKS / "archive" / "README.md").read_text()
    commit = re.search(r"git show ([0-9a-f]{7,40}):benchmarks/archive/", text)
    assert commit, "archive/README.md does not say which commit holds its files"
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
    if shallow.stdout.strip() != "false":
        pytest.skip("a shallow clone (or no git): the archive's commit may not be in it")
    known = subprocess.run(["git", "cat-file", "-e", f"{commit.group(1)}^{{commit}}"], cwd=REPO, capture_output=True)
    assert known.returncode == 0, f"archive/README.md names commit {commit.group(1)}, which this clone lacks"
