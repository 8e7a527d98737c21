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


def test_the_overlay_reaches_the_trees_launch_template(tmp_path):
    """The tree's flash_fwd_launch_template.h, preprocessed with the slice's flags (-E, a few seconds):
    with --features none its run_flash_fwd binds the bounds-checked is_even_MN (false) on both branches,
    even K only, no local, no ALiBi, no softcap, and never returns the softmax; the default keeps both
    branches of each, as the tree builds them."""
    import re

    from test_fa3_tree import preprocessed

    tree = fa2_tree()
    names = "IsEvenMNConst|IsEvenKConst|Is_local|ReturnSoftmaxConst|Has_alibi|Is_softcap"
    text = preprocessed(tmp_path, "flash_fwd_hdim128_fp16_causal_sm80", source=tree, profile="flash-attn-2",
                        hdim=128, dtype="fp16", arch="sm80", direction="fwd", causal="on", features="none")
    bound = set(re.findall(rf"constexpr static bool ({names}) = (true|false|flashbuild_site\.value_\w+)", text))
    assert bound == {("IsEvenMNConst", "flashbuild_site.value_true"), ("IsEvenMNConst", "flashbuild_site.value_false"),
                     ("ReturnSoftmaxConst", "flashbuild_site.value_true"),
                     ("ReturnSoftmaxConst", "flashbuild_site.value_false"),
                     ("IsEvenKConst", "true"), ("Is_local", "false"), ("Has_alibi", "false"), ("Is_softcap", "false")}
    # the BOOL_SWITCH sites' constants: IsEvenMNConst runs the general (false) kernel for either flag,
    # ReturnSoftmaxConst keeps false only (dropout is out)
    assert re.search(r'same\(name, "IsEvenMNConst"\)\) \{\s*return Site\{true, false, true, false', text)
    assert re.search(r'same\(name, "ReturnSoftmaxConst"\)\) \{\s*return Site\{false, false, true, false', text)
    everything = preprocessed(tmp_path / "all", "flash_fwd_hdim128_fp16_causal_sm80", source=tree,
                              profile="flash-attn-2", hdim=128, dtype="fp16", arch="sm80", direction="fwd", causal="on")
    assert {("Is_local", "true"), ("Is_local", "false"), ("IsEvenKConst", "false")} <= set(
        re.findall(rf"constexpr static bool ({names}) = (true|false)", everything))
