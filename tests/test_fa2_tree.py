"""A real flash-attn 2 tree (the 2.8.3 sdist, fetched when the test runs): one of its TUs compiles
through the profile with real nvcc (--compile-only: no GPU, no CUDA torch), with the stubs of what the
slice leaves out, and the tree is byte-for-byte unchanged afterwards."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import requires_nvcc
from upstream import fa2_tree, tree_digest

pytestmark = [pytest.mark.compile, requires_nvcc]


def test_one_upstream_tu_compiles_through_the_profile_and_the_tree_is_untouched(tmp_path):
    tree = fa2_tree()
    before = tree_digest(tree)
    cache = tmp_path / "cache"
    args = ["--source", str(tree), "--profile", "flash-attn-2", "--hdim", "64", "--dtype", "fp16", "--arch", "sm80",
            "--direction", "fwd", "--causal", "off", "--features", "none", "--compile-only"]
    process = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                             env={**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}, timeout=1800)
    assert process.returncode == 0, process.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    objects = sorted(p.name for p in (build_dir / "obj").glob("*.o"))
    assert objects == ["flash_fwd_hdim64_fp16_sm80.o", "flashbuild_missing.o"]
    assert all((build_dir / "obj" / name).stat().st_size > 0 for name in objects)
    assert "-DFLASHATTENTION_DISABLE_DROPOUT" in (build_dir / "build.ninja").read_text()
    assert tree_digest(tree) == before
