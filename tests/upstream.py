"""Upstream kernel trees for the tests that need one. Never committed: fetched when a test runs, kept
in a cache outside git, or skipped with the reason.

- flash-attn 2 (FLASHBUILD_FA2_SOURCE, else the flash-attn 2.8.3 sdist from the package index,
  unpacked into ~/.cache/flashbuild-tests);
- flash-attn 3 (FLASHBUILD_FA3_SOURCE: the flash-attention repository's hopper/ tree with its csrc,
  which no package carries; FLASHBUILD_FA3_CUTLASS: the CUTLASS include dir it pins).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

FA2_VERSION = "2.8.3"
TREES = Path(os.environ.get("FLASHBUILD_TEST_TREES", Path.home() / ".cache" / "flashbuild-tests"))


def fa2_tree() -> Path:
    """The root of a flash-attn 2 sdist tree, or pytest.skip saying why none can be had."""
    given = os.environ.get("FLASHBUILD_FA2_SOURCE")
    if given:
        if not (Path(given) / "csrc" / "flash_attn" / "flash_api.cpp").is_file():
            pytest.skip(f"FLASHBUILD_FA2_SOURCE={given} is not a flash-attn 2 tree (no csrc/flash_attn/flash_api.cpp)")
        return Path(given)
    root = TREES / f"flash_attn-{FA2_VERSION}"
    if (root / "csrc" / "flash_attn" / "flash_api.cpp").is_file():
        return root
    download = TREES / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    # pip runs the sdist's setup.py for its metadata: that needs torch, and must not build CUDA code.
    process = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
         "-q", f"flash-attn=={FA2_VERSION}", "-d", str(download)],
        capture_output=True, text=True, env={**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}, timeout=600)
    archives = sorted(download.glob(f"flash_attn-{FA2_VERSION}.tar.gz"))
    if process.returncode != 0 or not archives:
        last = (process.stderr or process.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"the flash-attn {FA2_VERSION} sdist could not be fetched from the package index "
                    f"(pip download: {last[0]}); set FLASHBUILD_FA2_SOURCE to an unpacked tree")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(TREES, filter="data")
    return root


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


def tree_digest(root: Path) -> str:
    """A hash of every file's path and bytes under root: equal before and after means untouched."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
