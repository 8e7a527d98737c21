"""Upstream kernel trees for the tests that need one. Never committed: fetched when a test runs, kept
in a cache outside git, or skipped with the reason.

- flash-attn 2 (FLASHBUILD_FA2_SOURCE, else a release's sdist from the package index, checked against
  configs/sources/sdists.toml and unpacked into ~/.cache/flashbuild-tests by the code `--source flash-attn==X` runs);
- flash-attn 3 (FLASHBUILD_FA3_SOURCE: the flash-attention repository's hopper/ tree with its csrc,
  which no package carries; FLASHBUILD_FA3_CUTLASS: the CUTLASS include dir it pins);
- flash-attn 3 at a commit (fa3_tree_at): hopper/ archived from a flash-attention git dir
  (FLASHBUILD_FA_MIRROR) and the CUTLASS its csrc/cutlass pins from a CUTLASS git dir
  (FLASHBUILD_CUTLASS_MIRROR), kept in the same cache; CI has the package index only, so it skips there.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from flashbuild.sources import release
from helpers import REPO

FA2_VERSION = "2.8.3"
TREES = Path(os.environ.get("FLASHBUILD_TEST_TREES", Path.home() / ".cache" / "flashbuild-tests"))


def fa2_tree(version: str = FA2_VERSION) -> Path:
    """The root of the flash-attn `version` sdist tree, or pytest.skip saying why none can be had.
    Fetched as `--source flash-attn==VERSION` fetches it (flashbuild/sources/release.py: pip download,
    the sha256 of configs/sources/sdists.toml, a checked unpack), into TREES. FLASHBUILD_FA2_SOURCE, an
    unpacked tree, is used instead when it is that release."""
    given = os.environ.get("FLASHBUILD_FA2_SOURCE")
    if given:
        init = Path(given) / "flash_attn" / "__init__.py"
        if not (Path(given) / "csrc" / "flash_attn" / "flash_api.cpp").is_file() or not init.is_file():
            pytest.skip(f"FLASHBUILD_FA2_SOURCE={given} is not a flash-attn 2 tree (no csrc/flash_attn/flash_api.cpp "
                        f"or flash_attn/__init__.py)")
        if f'__version__ = "{version}"' in init.read_text(errors="replace"):
            return Path(given)
    try:
        return release.fetch(f"flash-attn=={version}", into=TREES, table=REPO / "configs" / release.TABLE)
    except release.FetchError as exc:  # no network or no index here; an unknown version or a bad hash fails
        pytest.skip(f"the flash-attn {version} sdist could not be fetched: {exc}; set FLASHBUILD_FA2_SOURCE to an "
                    f"unpacked flash-attn {version} tree")


def fa3_tree() -> tuple[Path, Path]:
    """(flash-attention checkout with hopper/, CUTLASS include dir), or pytest.skip saying why."""
    source, cutlass = os.environ.get("FLASHBUILD_FA3_SOURCE"), os.environ.get("FLASHBUILD_FA3_CUTLASS")
    if not source:
        pytest.skip("FLASHBUILD_FA3_SOURCE is not set: FA3 (hopper/) is in no package; mirror "
                    "Dao-AILab/flash-attention and point FLASHBUILD_FA3_SOURCE at its root")
    if not (Path(source) / "hopper" / "flash_api.cpp").is_file():
        pytest.skip(f"FLASHBUILD_FA3_SOURCE={source} has no hopper/flash_api.cpp")
    include = Path(cutlass) if cutlass else Path(source) / "csrc" / "cutlass" / "include"
    if not (include / "cutlass" / "cutlass.h").is_file():
        pytest.skip(f"no CUTLASS at {include} (the csrc/cutlass submodule is not checked out): set "
                    f"FLASHBUILD_FA3_CUTLASS to the include/ dir of the CUTLASS the tree pins")
    return Path(source), include


def fa3_tree_at(ref: str) -> tuple[Path, Path]:
    """(hopper/ of flash-attention at `ref`, the include dir of the CUTLASS its csrc/cutlass pins),
    archived from the git dirs FLASHBUILD_FA_MIRROR and FLASHBUILD_CUTLASS_MIRROR into the test
    cache, or pytest.skip saying why."""
    mirror, cutlass_mirror = os.environ.get("FLASHBUILD_FA_MIRROR"), os.environ.get("FLASHBUILD_CUTLASS_MIRROR")
    if not mirror or not cutlass_mirror:
        pytest.skip(f"FA3 at {ref}: FLASHBUILD_FA_MIRROR / FLASHBUILD_CUTLASS_MIRROR are not set (git dirs of "
                    "Dao-AILab/flash-attention and NVIDIA/cutlass; hopper/ is in no package)")

    def git(git_dir: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, timeout=600)

    pin = git(mirror, "ls-tree", ref, "csrc/cutlass")
    fields = pin.stdout.decode().split()
    if pin.returncode != 0 or len(fields) < 3 or fields[1] != "commit":
        pytest.skip(f"FA3 at {ref}: {mirror} has no such commit with a csrc/cutlass submodule "
                    f"({pin.stderr.decode().strip()[-200:] or 'no csrc/cutlass entry'})")
    cutlass_commit = fields[2]
    root, include = TREES / f"fa3-{ref}", TREES / f"cutlass-{cutlass_commit[:12]}" / "include"
    for target, git_dir, commit, path, marker in ((root, mirror, ref, "hopper", root / "hopper" / "flash.h"),
                                                  (include.parent, cutlass_mirror, cutlass_commit, "include",
                                                   include / "cutlass" / "cutlass.h")):
        if marker.is_file():
            continue
        archive = git(git_dir, "archive", "--format=tar", commit, path)
        if archive.returncode != 0 or not archive.stdout:
            pytest.skip(f"FA3 at {ref}: git archive {commit} {path} from {git_dir} failed "
                        f"({archive.stderr.decode().strip()[-200:]})")
        staging = target.with_name(target.name + ".partial")
        for stale in (staging, target):  # a killed run's leftovers
            shutil.rmtree(stale, ignore_errors=True)
        staging.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(staging, filter="data")
        staging.rename(target)  # whole or not at all: a killed extraction never looks like a tree
    return root, include


def tree_digest(root: Path) -> str:
    """A hash of every file's path and bytes under root: equal before and after means untouched."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
