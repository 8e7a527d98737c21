"""A real FlashAttention-3 tree (opt-in: FLASHBUILD_FA3_SOURCE, and FLASHBUILD_FA3_CUTLASS when its
csrc/cutlass is not checked out; skipped with the reason otherwise, so never in CI): the smallest slice
(hdim 64, fp16, forward, no features) compiles through the profile with real nvcc for sm_90a
(--compile-only: no GPU, no CUDA torch). That is one kernel TU, plus the tree's scheduler kernel and
the stubs, which are small; the tree is byte-for-byte unchanged afterwards. About 4 minutes and 5 GB
on a 2-core machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import requires_nvcc
from upstream import fa3_tree, tree_digest

pytestmark = [pytest.mark.compile, requires_nvcc]


def test_one_fa3_tu_compiles_through_the_profile_and_the_tree_is_untouched(tmp_path):
    tree, cutlass = fa3_tree()
    before = tree_digest(tree / "hopper")
    cache = tmp_path / "cache"
    args = ["--source", str(tree), "--profile", "flash-attn-3", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90",
            "--direction", "fwd", "--features", "none", "--compile-only", "--jobs", "1"]
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache), "FLASHBUILD_FA3_CUTLASS": str(cutlass)}
    process = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                             env=environ, timeout=3600)
    assert process.returncode == 0, process.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    objects = sorted(p.name for p in (build_dir / "obj").glob("*.o"))
    assert objects == ["flash_fwd_hdim64_fp16_sm90.o", "flashbuild_missing.o", "flashbuild_prepare_scheduler.o"]
    assert all((build_dir / "obj" / name).stat().st_size > 0 for name in objects)
    ninja = (build_dir / "build.ninja").read_text()
    assert "arch=compute_90a,code=sm_90a" in ninja and "-DFLASHATTENTION_DISABLE_SPLIT" in ninja
    assert tree_digest(tree / "hopper") == before
