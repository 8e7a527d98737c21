"""The flash-attn-3 profile without a compiler: a tiny tree with FlashAttention-3's layout (hopper/ and
csrc/cutlass/include), the slice's TU names (as hopper/generate_kernels.py names them), what each TU
instantiates, the stubs for what the tree's API still reaches, the tree's defines for features left
out, the CUTLASS check, the Python files that make `import flash_attn_3._C` find the build's module,
and the pytest plugin's view of hopper/test_flash_attn.py's cases."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import builder, render, toolchain
from flashbuild.errors import SelectionError
from flashbuild.selection.variants import Variant
from flashbuild.sources import profile as profiles, pytest_slice, tree_check, units
from helpers import run_cli
from upstream import tree_digest

FA3 = profiles.load("flash-attn-3")
FEATURES = ("paged", "split", "softcap", "packgqa")

# hopper/instantiations/ of flash-attention 0251105a: every sm90 file of head dim 64, fp16, with the
# V head dims 256 and 512 (the *_softcapall_* and *_hdimall_* files only #include others, for setup.py's
# grouping).
TREE_HDIM64_FP16_SM90 = sorted([
    "flash_bwd_hdim64_fp16_sm90", "flash_bwd_hdim64_fp16_softcap_sm90", "flash_fwd_hdim64_256_fp16_packgqa_sm90",
    "flash_fwd_hdim64_256_fp16_paged_sm90", "flash_fwd_hdim64_256_fp16_paged_softcap_sm90",
    "flash_fwd_hdim64_256_fp16_paged_split_sm90", "flash_fwd_hdim64_256_fp16_paged_split_softcap_sm90",
    "flash_fwd_hdim64_256_fp16_sm90", "flash_fwd_hdim64_256_fp16_softcap_packgqa_sm90",
    "flash_fwd_hdim64_256_fp16_softcap_sm90", "flash_fwd_hdim64_256_fp16_split_sm90",
    "flash_fwd_hdim64_256_fp16_split_softcap_sm90", "flash_fwd_hdim64_512_fp16_packgqa_sm90",
    "flash_fwd_hdim64_512_fp16_paged_sm90", "flash_fwd_hdim64_512_fp16_paged_softcap_sm90",
    "flash_fwd_hdim64_512_fp16_paged_split_sm90", "flash_fwd_hdim64_512_fp16_paged_split_softcap_sm90",
    "flash_fwd_hdim64_512_fp16_sm90", "flash_fwd_hdim64_512_fp16_softcap_packgqa_sm90",
    "flash_fwd_hdim64_512_fp16_softcap_sm90", "flash_fwd_hdim64_512_fp16_split_sm90",
    "flash_fwd_hdim64_512_fp16_split_softcap_sm90", "flash_fwd_hdim64_fp16_packgqa_sm90",
    "flash_fwd_hdim64_fp16_paged_sm90", "flash_fwd_hdim64_fp16_paged_softcap_sm90",
    "flash_fwd_hdim64_fp16_paged_split_sm90", "flash_fwd_hdim64_fp16_paged_split_softcap_sm90",
    "flash_fwd_hdim64_fp16_sm90", "flash_fwd_hdim64_fp16_softcap_packgqa_sm90", "flash_fwd_hdim64_fp16_softcap_sm90",
    "flash_fwd_hdim64_fp16_split_sm90", "flash_fwd_hdim64_fp16_split_softcap_sm90",
])

VERSION_H = "#define CUTLASS_MAJOR {0}\n#define CUTLASS_MINOR {1}\n#define CUTLASS_PATCH {2}\n"


def fake_fa3_tree(base: Path, cutlass: tuple[int, int, int] = (4, 3, 4)) -> Path:
    """A tree with flash-attention's hopper/ layout (empty files) and a CUTLASS of the given version."""
    root = base / "flash-attention"
    files = [*FA3.required, *FA3.api_sources, *(s.file for s in FA3.support), "csrc/cutlass/include/cutlass/cutlass.h"]
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "csrc/cutlass/include/cutlass/version.h").write_text(VERSION_H.format(*cutlass))
    return root


@pytest.fixture
def fa3_tree(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("FLASHBUILD_FA3_CUTLASS", raising=False)
    return fake_fa3_tree(tmp_path)


def plan_for(tree: Path, **kwargs):
    kwargs.setdefault("arch", "sm90")
    return builder.make_plan(*builder.parse_request(source=tree, profile="flash-attn-3", **kwargs))


def texts_of(plan) -> dict[str, str]:
    return render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                               context=builder.tree_context(plan))


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


# ---------------------------------------------------------------- which TUs, named as the tree names them

def test_the_hdim64_fp16_slice_is_the_trees_own_sm90_files_plus_scheduler_and_combine(fa3_tree):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16")
    kernels = sorted(u.name for u in plan.units if u.source is None)
    # and the hdim-256 backward, on which a backward with V head dim 256 runs (feature hdimv)
    assert kernels == sorted(TREE_HDIM64_FP16_SM90 + ["flash_bwd_hdim256_fp16_sm90", "flash_bwd_hdim256_fp16_softcap_sm90"])
    support = [(u.name, u.source) for u in plan.units if u.source is not None]
    assert support == [("flashbuild_prepare_scheduler", "hopper/flash_prepare_scheduler.cu"),
                       ("flashbuild_fwd_combine", "hopper/flash_fwd_combine.cu")]
    assert all(u.archs == ("sm90",) for u in plan.units)


def test_features_left_out_leave_out_their_tus_and_become_the_trees_defines(fa3_tree):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="none")
    assert [u.name for u in plan.units] == ["flash_fwd_hdim64_fp16_sm90", "flash_bwd_hdim64_fp16_sm90",
                                            "flashbuild_prepare_scheduler"]  # no combine kernel without split
    assert toolchain.feature_defines(plan) == ["-DFLASHATTENTION_DISABLE_PAGEDKV", "-DFLASHATTENTION_DISABLE_SPLIT",
                                               "-DFLASHATTENTION_DISABLE_SOFTCAP", "-DFLASHATTENTION_DISABLE_PACKGQA",
                                               "-DFLASHBUILD_FA3_NO_HDIMV",  # a marker: the API keeps those kernels
                                               # markers too: the overlay narrows these switches (sources/switches.py)
                                               "-DFLASHBUILD_NO_SWITCH_LOCAL", "-DFLASHBUILD_NO_SWITCH_VARLEN",
                                               "-DFLASHBUILD_NO_SWITCH_APPENDKV", "-DFLASHBUILD_NO_SWITCH_QV",
                                               "-DFLASHBUILD_NO_SWITCH_DETERMINISTIC", "-DFLASHBUILD_NO_SWITCH_GQA",
                                               "-DFLASHBUILD_NO_SWITCH_CLUSTER"]
    softcap = plan_for(fa3_tree, hdim=64, dtype="fp16", features="softcap", direction="fwd,bwd")
    assert [u.name for u in softcap.units if u.source is None] == [
        "flash_fwd_hdim64_fp16_sm90", "flash_fwd_hdim64_fp16_softcap_sm90",
        "flash_bwd_hdim64_fp16_sm90", "flash_bwd_hdim64_fp16_softcap_sm90"]
    assert "-DFLASHATTENTION_DISABLE_SOFTCAP" not in toolchain.feature_defines(softcap)
    assert softcap.key != plan.key and softcap.key.startswith("flash-attn-3-sm90-fp16-h64-fwd+bwd-")


def test_the_full_tree_of_the_profiles_space_against_one_slice(fa3_tree):
    """The profile's whole space (sm90, fp16+bf16, 5 head dims, every feature) is setup.py's sm90
    fp16/bf16 list: 5 head dims x 2 dtypes x (10 fwd + 2 bwd), plus the V-head-dim kernels (64_256,
    64_512, 192_128) x 2 dtypes x 10."""
    full = plan_for(fa3_tree, hdim="64,96,128,192,256", dtype="fp16,bf16")
    kernels = [u for u in full.units if u.source is None]
    assert len(kernels) == 5 * 2 * (10 + 2) + 3 * 2 * 10 == 180
    assert full.missing == ()  # everything the API reaches is built: no stubs
    one = plan_for(fa3_tree, hdim=64, dtype="fp16")
    assert len([u for u in one.units if u.source is None]) == 32 + 2  # + the hdim-256 bwd of V head dim 256
    small = plan_for(fa3_tree, hdim=64, dtype="fp16", features="softcap")
    assert len([u for u in small.units if u.source is None]) == 4


@pytest.mark.parametrize("name, args", [
    ("flash_fwd_hdim64_fp16_sm90", "<90, cutlass::half_t, 64, 64, false, false, false, false>"),
    ("flash_fwd_hdim64_fp16_packgqa_sm90", "<90, cutlass::half_t, 64, 64, false, false, false, true>"),
    ("flash_fwd_hdim64_fp16_softcap_packgqa_sm90", "<90, cutlass::half_t, 64, 64, false, false, true, true>"),
    # GQA is always packed in split and paged kernels: their PackGQA argument is true
    ("flash_fwd_hdim64_fp16_split_sm90", "<90, cutlass::half_t, 64, 64, true, false, false, true>"),
    ("flash_fwd_hdim64_fp16_paged_sm90", "<90, cutlass::half_t, 64, 64, false, true, false, true>"),
    ("flash_fwd_hdim64_fp16_paged_split_softcap_sm90", "<90, cutlass::half_t, 64, 64, true, true, true, true>"),
    ("flash_fwd_hdim64_512_fp16_softcap_sm90", "<90, cutlass::half_t, 64, 512, false, false, true, false>"),
])
def test_each_forward_tu_instantiates_the_trees_template_with_its_features(fa3_tree, name, args):
    text = texts_of(plan_for(fa3_tree, hdim=64, dtype="fp16", direction="fwd"))[f"{name}.cu"]
    assert "hdim 64 (V head dim 512)" in text if "_512_" in name else "V head dim" not in text
    assert '#include "flash_fwd_launch_template.h"' in text
    assert f"template void run_mha_fwd_{args}(Flash_fwd_params &params, cudaStream_t stream);" in text
    assert text.startswith("// Generated by flashbuild ") and "Do not edit." in text.splitlines()[0]


def test_backward_and_support_tus(fa3_tree):
    texts = texts_of(plan_for(fa3_tree, hdim=128, dtype="bf16"))
    bwd = flat(texts["flash_bwd_hdim128_bf16_softcap_sm90.cu"])
    assert "void run_mha_bwd_<90, cutlass::bfloat16_t, 128, true>(Flash_bwd_params &params, cudaStream_t stream) { " \
           "run_mha_bwd_hdim128<90, cutlass::bfloat16_t, true>(params, stream); }" in bwd
    assert '#include "flash_prepare_scheduler.cu"' in texts["flashbuild_prepare_scheduler.cu"]
    assert '#include "flash_fwd_combine.cu"' in texts["flashbuild_fwd_combine.cu"]


# ---------------------------------------------------------------- what the API reaches and the slice leaves out

def test_stubs_cover_every_kernel_the_api_reaches_and_the_slice_leaves_out(fa3_tree):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="split,softcap")
    # the API (features left out -D'd out of it too, but not the V head dims): 2 dtypes x (fwd: 8 head
    # dim / V head dim pairs x 4 split/softcap combinations, bwd: 5 head dims x 2 softcap values), less
    # the 6 kernels built
    assert len(plan.missing) == 2 * (8 * 4 + 5 * 2) - 6
    assert {m.reason for m in plan.missing if m.hdim == 64 and m.dtype == "fp16"} == {"hdim_v"}
    assert {m.reason for m in plan.missing if m.hdim == 64 and m.dtype == "bf16"} == {"dtype"}
    assert {m.reason for m in plan.missing if m.hdim != 64} == {"hdim"}
    stubs = texts_of(plan)[f"{render.MISSING_TU}.cu"]
    assert stubs.count("template <>") == len(plan.missing)
    one = flat(stubs[stubs.index("run_mha_fwd_<90, cutlass::half_t, 128, 128, true, false, true, true>"):])
    one = one[:one.index("}")]
    assert "flashbuild_head_dim_miss(params.d, params.dv, \" runs on the hdim-128 kernel, which this flashbuild slice of " \
           "flash-attn-3 does not hold (it holds 64 (head dims 1-64)); rebuild with: flashbuild --source " in one
    assert "--profile flash-attn-3 --hdim 64,128 --dtype fp16" in one and "--features split,softcap" in one
    assert "dtype bf16: this flashbuild slice of flash-attn-3 holds fp16 only; rebuild with: " in stubs
    assert "--dtype fp16,bf16" in stubs
    dv = flat(stubs[stubs.index("run_mha_fwd_<90, cutlass::half_t, 64, 256, false, false, false, false>"):])
    assert dv.startswith("run_mha_fwd_<90, cutlass::half_t, 64, 256, false, false, false, false>(Flash_fwd_params& "
                         "params, cudaStream_t) { flashbuild_head_dim_v_miss(params.d, params.dv, \": the hdim-64 "
                         "kernels for a V head dim other than 64 (V head dims 256, 512) are feature hdimv, which this "
                         "flashbuild slice of flash-attn-3 leaves out; rebuild with: flashbuild --source ")
    assert "--features split,softcap,hdimv" in dv[:600]


def test_a_direction_left_out_is_a_stub_naming_the_fix(fa3_tree):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="none", direction="fwd")
    bwd = [m for m in plan.missing if m.direction == "bwd" and m.hdim == 64 and m.dtype == "fp16"]
    assert [m.reason for m in bwd] == ["direction"]
    assert "holds no backward kernels (it holds fwd); rebuild with: flashbuild --source" in bwd[0].note
    assert "--direction fwd,bwd" in bwd[0].note
    stubs = texts_of(plan)[f"{render.MISSING_TU}.cu"]
    assert "void run_mha_bwd_<90, cutlass::half_t, 64, false>(Flash_bwd_params& params, cudaStream_t)" in stubs


def test_dry_run_lists_the_tus_stubs_and_the_module(fa3_tree):
    result = run_cli("--source", str(fa3_tree), "--profile", "flash-attn-3", "--hdim", "64", "--dtype", "fp16",
                     "--arch", "sm90", "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "plan: flash-attn-3 at" in out
    assert re.search(r"flash_fwd_hdim64_fp16_paged_split_softcap_sm90\.cu +from templates/profiles/flash-attn-3/fwd\.cu\.j2", out)
    beside = out[out.index("render beside the extension, into "):out.index("compile ")]
    assert re.search(r"flash_attn_3/__init__\.py +from templates/profiles/flash-attn-3/package_init\.py\.j2", beside)
    assert "flash_attn_config.py" in beside and "../" not in out
    assert "-gencode arch=compute_90a,code=sm_90a" in out and "stubs for 146 combinations" in out
    assert "compile 37 kernel TUs:" in out  # 34 instantiations, scheduler, combine, stubs
    assert "switches   every branch compiled, as the tree builds it" in out  # the default: the tree's own build
    narrowed = run_cli("--source", str(fa3_tree), "--profile", "flash-attn-3", "--hdim", "64", "--dtype", "fp16",
                       "--arch", "sm90", "--causal", "on", "--features", "none", "--dry-run").stdout
    assert ("switches   CAUSAL_LOCAL_SWITCH: causal kept, local left out, not_causal left out; VARLEN_SWITCH: true "
            "left out, false kept;") in narrowed
    assert "CLUSTER_SWITCH: true runs the general branch, false kept" in narrowed


# ---------------------------------------------------------------- CUTLASS: found, and the version the tree pins

def test_a_missing_cutlass_is_an_error_before_compiling(fa3_tree, cache):
    (fa3_tree / "csrc/cutlass/include/cutlass/cutlass.h").unlink()
    result = run_cli("--source", str(fa3_tree), "--profile", "flash-attn-3", "--hdim", "64", "--arch", "sm90")
    assert result.exit_code == 2, result.output
    assert "csrc/cutlass/include/cutlass/cutlass.h (profile key tree.cutlass; or set FLASHBUILD_FA3_CUTLASS" \
           in result.stderr
    assert not cache.exists()


def test_a_cutlass_of_another_version_is_an_error_naming_both(tmp_path, monkeypatch, cache):
    monkeypatch.delenv("FLASHBUILD_FA3_CUTLASS", raising=False)
    tree = fake_fa3_tree(tmp_path, cutlass=(3, 9, 2))
    result = run_cli("--source", str(tree), "--profile", "flash-attn-3", "--hdim", "64", "--arch", "sm90")
    assert result.exit_code == 2, result.output
    assert "is CUTLASS 3.9.2, and the tree expects 4.3.x (flash-attention 0251105a pins csrc/cutlass at " \
           "7127592069c2, CUTLASS 4.3.4); point FLASHBUILD_FA3_CUTLASS at the include/ dir of CUTLASS 4.3" \
           in result.stderr
    assert not cache.exists()


def test_flashbuild_fa3_cutlass_points_elsewhere(tmp_path, monkeypatch):
    tree = fake_fa3_tree(tmp_path, cutlass=(3, 9, 2))
    pinned = tmp_path / "cutlass-4.3.4" / "include"
    (pinned / "cutlass").mkdir(parents=True)
    (pinned / "cutlass" / "cutlass.h").write_text("")
    (pinned / "cutlass" / "version.h").write_text(VERSION_H.format(4, 3, 4))
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(pinned))
    plan = plan_for(tree, hdim=64, dtype="fp16")
    assert tree_check.cutlass_include(plan.profile, tree) == pinned.resolve()
    (pinned / "cutlass" / "version.h").write_text("// no version here\n")
    with pytest.raises(SelectionError, match=r"FLASHBUILD_FA3_CUTLASS=.* is CUTLASS of unknown version"):
        plan_for(tree, hdim=64, dtype="fp16")


def pinned_cutlass(base: Path, version: tuple[int, int, int] = (4, 3, 4)) -> Path:
    include = base / "include"
    (include / "cutlass").mkdir(parents=True)
    (include / "cutlass" / "cutlass.h").write_text("")
    (include / "cutlass" / "version.h").write_text(VERSION_H.format(*version))
    return include


def test_the_cutlass_a_build_uses_is_part_of_its_key(fa3_tree, tmp_path, monkeypatch):
    """Two requests differing only in CUTLASS (the tree's submodule, or FLASHBUILD_FA3_CUTLASS naming
    another checkout of the same version) are two builds, not one build dir recompiled in full at
    each switch (or, linked, loaded for the other's CUTLASS)."""
    submodule = plan_for(fa3_tree, hdim=64, dtype="fp16")
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(pinned_cutlass(tmp_path / "a")))
    a = plan_for(fa3_tree, hdim=64, dtype="fp16")
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(pinned_cutlass(tmp_path / "b")))
    b = plan_for(fa3_tree, hdim=64, dtype="fp16")
    assert len({submodule.key, a.key, b.key}) == 3 and len({submodule.build_dir, a.build_dir, b.build_dir}) == 3
    assert b.key == plan_for(fa3_tree, hdim=64, dtype="fp16").key  # the same CUTLASS, the same key
    (tmp_path / "b" / "include" / "cutlass" / "version.h").write_text(VERSION_H.format(4, 3, 5))
    assert plan_for(fa3_tree, hdim=64, dtype="fp16").key != b.key  # another CUTLASS in the same place


# ---------------------------------------------------------------- the Python side: flash_attn_3._C from the build

def _ok():
    from flashbuild.pipeline.ninja_output import NinjaOutput
    out = NinjaOutput()
    out.finish(0)
    return out


def test_the_build_dir_holds_the_config_and_a_package_whose_C_is_the_builds(fa3_tree, cache, monkeypatch):
    """Render a build (ninja replaced): the tree is untouched, flash_attn_config.py and flash_attn_3/
    land in the build dir, and with it first on the path `import flash_attn_3._C` finds the build's
    module (a stand-in _C.py here) while the rest of the package is the tree's."""
    (fa3_tree / "hopper/flash_attn_3/__init__.py").write_text(
        "from flash_attn_config import *\nimport flash_attn_interface as _flash_attn_interface\n")
    (fa3_tree / "hopper/flash_attn_3/flash_attn_interface.py").write_text("WHERE = 'tree'\n")
    (fa3_tree / "hopper/flash_attn_interface.py").write_text("import flash_attn_3._C\nINTERFACE = 'tree'\n")
    before = tree_digest(fa3_tree)
    monkeypatch.setattr(builder, "run_ninja", lambda plan: (_ok(), {}))
    selection, options = builder.parse_request(source=fa3_tree, profile="flash-attn-3", hdim=64, dtype="fp16",
                                               arch="sm90", features="softcap", compile_only=True)
    monkeypatch.setattr(builder, "toolchain", lambda plan: toolchain.graph.Toolchain(
        nvcc=Path("/cuda/bin/nvcc"), include_dirs=(), gencodes=FA3.gencodes))
    result = builder.build(selection, options)
    assert tree_digest(fa3_tree) == before
    build_dir = result.build_dir
    config = (build_dir / "flash_attn_config.py").read_text()
    assert '"FLASHATTENTION_DISABLE_SOFTCAP": False' in config and '"FLASHATTENTION_DISABLE_SPLIT": True' in config
    assert '"FLASHATTENTION_DISABLE_HDIM128": False' in config  # the API rounds to it; its stub says the fix
    (build_dir / "_C.py").write_text("BUILT = 'build'\n")  # stands in for _C.so
    script = ("import flash_attn_3, flash_attn_3._C as c, flash_attn_interface as i, flash_attn_3.flash_attn_interface "
              "as p; print(c.BUILT, c.__file__, flash_attn_3.CONFIG['build_flags']['FLASHATTENTION_DISABLE_SOFTCAP'], "
              "i.INTERFACE, p.WHERE)")
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": f"{build_dir}:{fa3_tree / 'hopper'}",
                                  "PYTHONDONTWRITEBYTECODE": "1"})
    assert process.returncode == 0, process.stderr
    built, where, softcap_off, interface, package_module = process.stdout.split()
    assert (built, Path(where).parent, softcap_off, interface, package_module) == (
        "build", build_dir, "False", "tree", "tree")
    manifest = json.loads((build_dir / "manifest.json").read_text())
    assert manifest["profile"] == "flash-attn-3" and manifest["extension"] is None
    assert tree_digest(fa3_tree) == before


def test_python_files_beside_the_extension_are_plain_names_rendered_into_the_build_dir(fa3_tree, cache):
    """flash_attn_config.py and flash_attn_3/ are imported from the build dir (first on the import path),
    so they are rendered there, not into generated/ (the include path), and named without a '../'."""
    assert [(g.file, g.beside_extension) for g in FA3.generated] == [
        ("flash_attn_config.py", True), ("flash_attn_3/__init__.py", True), ("flashbuild_switches.h", False)]
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="none")
    paths = render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
    assert plan.build_dir / "flash_attn_config.py" in paths and plan.build_dir / "flash_attn_3/__init__.py" in paths
    assert not (plan.gen_dir / "flash_attn_config.py").exists() and not (plan.gen_dir / "flash_attn_3").exists()
    assert render.up_to_date(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                             context=builder.tree_context(plan))


def test_the_package_without_the_tree_on_the_path_says_how_to_run(fa3_tree, cache, monkeypatch):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="none")
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    process = subprocess.run([sys.executable, "-c", "import flash_attn_3"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(plan.build_dir), "PYTHONDONTWRITEBYTECODE": "1"},
                             cwd=plan.build_dir.parent)
    assert process.returncode != 0
    assert "needs the flash-attention tree's hopper/ on sys.path" in process.stderr
    assert "flashbuild run --source TREE --profile flash-attn-3" in process.stderr


# ---------------------------------------------------------------- the profile's own checks

def test_tus_must_name_features_and_directions_of_the_profile(tmp_path):
    text = (Path(FA3.path).read_text()
            .replace('tus = { fwd = ["paged", "split", "softcap", "packgqa"], bwd = ["softcap"] }',
                     'tus = { fwd = ["paged", "rotary"] }'))
    path = tmp_path / "fa3-broken.toml"
    path.write_text(text)
    with pytest.raises(SelectionError, match=r"key features\.tus: expected direction = \[feature, \.\.\.\]"):
        profiles.load(path)


# ---------------------------------------------------------------- hopper/test_flash_attn.py on a slice

def manifest_for(features):
    return {"key": "k", "profile": "flash-attn-3", "selection": {"hdim": [64], "dtype": ["fp16"], "features": features}}


@pytest.mark.parametrize("params, features, why", [
    (dict(dtype="torch.float16", d=64, softcap=0.0), [], None),
    (dict(dtype="torch.float16", d=56, softcap=0.0), [], None),          # rounds up to the hdim-64 kernel
    (dict(dtype="torch.bfloat16", d=64), [], "dtype bf16"),
    (dict(dtype="torch.float8_e4m3fn", d=64), [], "dtype torch.float8_e4m3fn"),
    (dict(dtype="torch.float16", d=96), [], "head dim 96 (the hdim-96 kernel)"),
    (dict(dtype="torch.float16", d=64, softcap=15.0), [], "softcap (softcap=15.0)"),
    (dict(dtype="torch.float16", d=64, softcap=15.0), ["softcap"], None),
])
def test_the_plugin_keeps_the_cases_an_fa3_slice_serves(params, features, why):
    assert pytest_slice.serves(params, manifest_for(features), FA3) == why


def test_the_plugin_sets_the_test_modules_switches_for_what_the_slice_leaves_out():
    manifest = {"key": "k", "profile": "flash-attn-3",
                "selection": {"hdim": [64, 128], "dtype": ["fp16"], "features": ["softcap", "hdimv"]}}
    assert pytest_slice.test_environment(manifest, FA3) == {
        "FLASH_ATTENTION_DISABLE_FP8": "TRUE", "FLASH_ATTENTION_DISABLE_PAGEDKV": "TRUE",
        "FLASH_ATTENTION_DISABLE_SPLIT": "TRUE", "FLASH_ATTENTION_DISABLE_PACKGQA": "TRUE",
        "FLASH_ATTENTION_DISABLE_HDIM96": "TRUE", "FLASH_ATTENTION_DISABLE_HDIM192": "TRUE",
        "FLASH_ATTENTION_DISABLE_HDIM256": "TRUE",
        # the switch features left out (local, appendkv) that the module reads (profile key switches.tests.env)
        "FLASH_ATTENTION_DISABLE_LOCAL": "TRUE", "FLASH_ATTENTION_DISABLE_APPENDKV": "TRUE"}
    fa2 = profiles.load("flash-attn-2")
    assert pytest_slice.test_environment({"selection": {"hdim": [64], "dtype": ["fp16"], "features": []}}, fa2) == {}


FAKE_TEST_MODULE = '''
import os
import pytest
HDIMS = [d for d in (64, 96, 128) if os.environ.get(f"FLASH_ATTENTION_DISABLE_HDIM{d}", "FALSE") != "TRUE"]
SPLITS = [1] + ([] if os.environ.get("FLASH_ATTENTION_DISABLE_SPLIT", "FALSE") == "TRUE" else [3])

@pytest.mark.parametrize("dtype", ["torch.bfloat16", "torch.float16"])
@pytest.mark.parametrize("softcap", [0.0, 15.0])
@pytest.mark.parametrize("d", HDIMS)
def test_case(dtype, softcap, d):
    assert SPLITS == [1]
'''


def test_the_plugin_runs_a_tree_module_on_the_slice_only(tmp_path):
    """A stand-in for hopper/test_flash_attn.py: its head dims come from the environment the plugin
    sets, dtype and softcap cases outside the slice are deselected, and split is off in the module."""
    (tmp_path / "test_fake_fa3.py").write_text(FAKE_TEST_MODULE)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"key": "k", "profile": "flash-attn-3",
                                    "selection": {"hdim": [64], "dtype": ["fp16"], "features": ["hdimv"]}}))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_DISABLE_")}
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "flashbuild.sources.pytest_slice",
                              "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa3.py")],
                             capture_output=True, text=True, cwd=tmp_path,
                             env={**environ, "FLASHBUILD_SLICE": str(manifest), "PYTHONDONTWRITEBYTECODE": "1"})
    assert process.returncode == 0, process.stdout[-2000:]
    assert "1 passed, 3 deselected" in process.stdout  # d=64 only; bf16 and softcap=15 deselected
    # a build's manifest names its tree: the plugin's cache-dir redirect must not need the cacheprovider
    manifest.write_text(json.dumps({"key": "k", "profile": "flash-attn-3", "source": str(tmp_path),
                                    "selection": {"hdim": [64], "dtype": ["fp16"], "features": ["hdimv"]}}))
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "flashbuild.sources.pytest_slice",
                              "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa3.py")],
                             capture_output=True, text=True, cwd=tmp_path,
                             env={**environ, "FLASHBUILD_SLICE": str(manifest), "PYTHONDONTWRITEBYTECODE": "1"})
    assert process.returncode == 0 and "1 passed, 3 deselected" in process.stdout, process.stdout[-2000:]
    # a detected tree's build records its release line (flash-attn-3@3.0.0): the plugin takes it (found on
    # the H200: it stopped with "neither a profile ... nor a .toml file"); a line the profile lacks is a usage error
    for profile, code, expected in (("flash-attn-3@3.0.0", 0, "1 passed, 3 deselected"),
                                    ("flash-attn-3@9.9", 4, "has no release line 9.9")):
        manifest.write_text(json.dumps({"key": "k", "profile": profile, "source": str(tmp_path),
                                        "selection": {"hdim": [64], "dtype": ["fp16"], "features": ["hdimv"]}}))
        process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "flashbuild.sources.pytest_slice",
                                  "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa3.py")],
                                 capture_output=True, text=True, cwd=tmp_path,
                                 env={**environ, "FLASHBUILD_SLICE": str(manifest), "PYTHONDONTWRITEBYTECODE": "1"})
        output = process.stdout + process.stderr
        assert process.returncode == code and expected in output, output[-2000:]


def test_the_adapter_serves_each_kernel_unit_for_both_causal_values(fa3_tree):
    """test/bench see one plain variant per kernel unit and causal value (causal is decided at runtime),
    and its local(+softcap) feature variant; not the support TUs, not the feature TUs (the same
    kernels with paged / split on), not the hdim-256 backward that only V head dim 256 calls run on."""
    from flashbuild.debug import adapters

    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", features="split,softcap,hdimv,local")
    manifest = {"selection": {"hdim": [64], "features": list(plan.selection.features)},
                "units": [{"direction": u.direction, "hdim": u.hdim, "dtype": u.dtype, "features": list(u.features),
                           "archs": list(u.archs)} for u in plan.units]}
    assert [v.name for v in adapters.fa3_slice_variants(manifest)] == [
        "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_local_softcap", "fwd_hdim64_fp16_causal_sm90",
        "fwd_hdim64_fp16_causal_sm90_local_softcap", "bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_sm90_local_softcap",
        "bwd_hdim64_fp16_causal_sm90", "bwd_hdim64_fp16_causal_sm90_local_softcap"]
    # local windows only where the switch overlay keeps them; causal values as the selection narrows them
    narrowed = {**manifest, "selection": {"hdim": [64], "features": ["softcap"], "causal": "on"}}
    assert [v.name for v in adapters.fa3_slice_variants(narrowed)] == [
        "fwd_hdim64_fp16_causal_sm90", "fwd_hdim64_fp16_causal_sm90_softcap", "bwd_hdim64_fp16_causal_sm90",
        "bwd_hdim64_fp16_causal_sm90_softcap"]
    assert adapters.ADAPTERS[FA3.adapter] is adapters.FlashAttn3Slice


def test_the_fa3_adapter_calls_the_trees_flash_attn_interface(tmp_path, monkeypatch):
    """The tree's flash_attn_3 package holds only a version (0251105a): the adapter calls
    hopper/flash_attn_interface.py, the module upstream's own tests import (a stand-in here). FA3
    writes LSE -inf for a row that sees no key; the checks' contract (ours, FA2's) is +inf."""
    from flashbuild.debug import adapters

    (tmp_path / "flash_attn_interface.py").write_text(
        "import torch\nflash_attn_3_gpu = 'ops'\n"
        "def flash_attn_func(q, k, v, **kw):\n    return ('out', torch.tensor([1.5, float('-inf')]))\n"
        "def flash_attn_with_kvcache(*args, **kw):\n    return ('cache-out', 'cache-lse')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_attn_interface", raising=False)
    package = type(sys)("flash_attn_3")  # a version, nothing else, as the tree's __init__.py
    fa3 = adapters.FlashAttn3Slice(package, {"selection": {"hdim": [64]}, "units": []})
    assert fa3.ext == "ops"
    out, lse = fa3.flash_attn_func(None, None, None, return_lse=True)
    assert out == "out" and lse.tolist() == [1.5, float("inf")]


@pytest.mark.parametrize("shard, selected", [("0/2", "1 passed, 3 deselected"), ("1/2", "0 passed")])
def test_the_plugin_shards_count_from_zero(tmp_path, shard, selected):
    """FLASHBUILD_SLICE_SHARD=i/n keeps every n-th served case from i: 0/2 has the one case, 1/2 none."""
    (tmp_path / "test_fake_fa3.py").write_text(FAKE_TEST_MODULE)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"key": "k", "profile": "flash-attn-3",
                                    "selection": {"hdim": [64], "dtype": ["fp16"], "features": ["hdimv"]}}))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_DISABLE_")}
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "flashbuild.sources.pytest_slice",
                              "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa3.py")],
                             capture_output=True, text=True, cwd=tmp_path,
                             env={**environ, "FLASHBUILD_SLICE": str(manifest), "FLASHBUILD_SLICE_SHARD": shard,
                                  "PYTHONDONTWRITEBYTECODE": "1"})
    if selected == "0 passed":
        assert "4 deselected" in process.stdout, process.stdout[-2000:]
    else:
        assert selected in process.stdout, process.stdout[-2000:]


@pytest.mark.parametrize("shard", ["5/5", "-1/3", "2", "a/b", "0/0"])
def test_a_shard_outside_0_to_n_minus_1_is_refused(shard):
    """5/5 once selected nothing and ran no test, silently (rc 5); it now names the valid range."""
    with pytest.raises(pytest.UsageError, match=r"0 <= i < n"):
        pytest_slice.shard_of(shard)
    assert pytest_slice.shard_of("4/5") == (4, 5) and pytest_slice.shard_of(None) is None


# ---------------------------------------------------------------- switches narrowed inside each TU

def overlay_branches(text: str) -> dict[str, list]:
    """From the rendered overlay alone: each macro -> its branches in order, each the constants it binds
    ({name: value}) or "miss" (a throw); each BOOL_SWITCH site -> (true branch, false branch) likewise."""
    out = {}
    for name, body in re.findall(r"#define (\w+)\([^)]*\) \[&\] \{ \\\n(.*?)\n\}\(\)", text, re.S):
        if name == "BOOL_SWITCH":
            continue
        branches = []
        for branch in re.split(r"\n  (?:if|else if|else)\b", "\n" + body)[1:]:
            binds = dict(re.findall(r"constexpr static bool (\w+) = (true|false);", branch))
            branches.append("miss" if "flashbuild_switch::miss(" in branch else
                            {k: v == "true" for k, v in binds.items()})
        out[name] = branches
    for site, args in re.findall(r'if \(same\(name, "(\w+)"\)\) \{\s*return Site\{(.*?)\};', text, re.S):
        keep_t, value_t, keep_f, value_f = (a.strip() == "true" for a in args.split(",")[:4])
        out[f"BOOL_SWITCH:{site}"] = [{"CONST_NAME": value_t} if keep_t else "miss",
                                      {"CONST_NAME": value_f} if keep_f else "miss"]
    return out


CAUSAL, LOCAL, PLAIN = ({"CAUSAL_CONST_NAME": True, "LOCAL_CONST_NAME": False},
                        {"CAUSAL_CONST_NAME": False, "LOCAL_CONST_NAME": True},
                        {"CAUSAL_CONST_NAME": False, "LOCAL_CONST_NAME": False})
ON, OFF = {"CONST_NAME": True}, {"CONST_NAME": False}


@pytest.mark.parametrize("causal, features, expected", [
    # --causal on, nothing else: Is_causal=true, Is_local=false and nothing else (the acceptance slice)
    ("on", "none", {"CAUSAL_LOCAL_SWITCH": [CAUSAL, "miss", "miss"], "VARLEN_SWITCH": ["miss", OFF],
                    "APPENDKV_SWITCH": ["miss", OFF], "CLUSTER_SWITCH": [OFF, OFF],
                    "BOOL_SWITCH:HasQV_": ["miss", OFF], "BOOL_SWITCH:Deterministic_": ["miss", OFF],
                    "BOOL_SWITCH:GQA": ["miss", OFF]}),
    # the backward's GQA site: GQA = true only with gqa (its dK/dV buffers exist only for GQA calls)
    ("on", "gqa", {"BOOL_SWITCH:GQA": [ON, OFF], "BOOL_SWITCH:Deterministic_": ["miss", OFF],
                   "CAUSAL_LOCAL_SWITCH": [CAUSAL, "miss", "miss"]}),
    ("off", "none", {"CAUSAL_LOCAL_SWITCH": ["miss", "miss", PLAIN], "CLUSTER_SWITCH": [OFF, OFF]}),
    ("both", "local,varlen", {"CAUSAL_LOCAL_SWITCH": [CAUSAL, LOCAL, PLAIN], "VARLEN_SWITCH": [ON, OFF],
                              "APPENDKV_SWITCH": ["miss", OFF]}),
    ("off", "local,cluster,qv", {"CAUSAL_LOCAL_SWITCH": ["miss", LOCAL, PLAIN], "CLUSTER_SWITCH": [ON, OFF],
                                 "BOOL_SWITCH:HasQV_": [ON, OFF], "VARLEN_SWITCH": ["miss", OFF]}),
    # the default (every feature, causal both) is the tree's own build: every branch kept
    ("both", None, {"CAUSAL_LOCAL_SWITCH": [CAUSAL, LOCAL, PLAIN], "VARLEN_SWITCH": [ON, OFF],
                    "APPENDKV_SWITCH": [ON, OFF], "CLUSTER_SWITCH": [ON, OFF], "BOOL_SWITCH:HasQV_": [ON, OFF],
                    "BOOL_SWITCH:Deterministic_": [ON, OFF], "BOOL_SWITCH:GQA": [ON, OFF]}),
])
def test_the_overlay_holds_exactly_the_selected_branches(fa3_tree, causal, features, expected):
    kwargs = {} if features is None else {"features": features}
    plan = plan_for(fa3_tree, hdim=128, dtype="fp16", direction="fwd", causal=causal, **kwargs)
    branches = overlay_branches(texts_of(plan)["flashbuild_switches.h"])
    assert set(branches) == {"CAUSAL_LOCAL_SWITCH", "VARLEN_SWITCH", "APPENDKV_SWITCH", "CLUSTER_SWITCH",
                             "BOOL_SWITCH:HasQV_", "BOOL_SWITCH:Deterministic_", "BOOL_SWITCH:GQA"}
    for macro, wanted in expected.items():
        assert branches[macro] == wanted, macro


def test_each_left_out_branch_names_the_call_and_the_command_that_adds_it(fa3_tree):
    plan = plan_for(fa3_tree, hdim=128, dtype="fp16", direction="fwd", causal="on", features="none")
    text = flat(texts_of(plan)["flashbuild_switches.h"])
    assert ("a call that is neither causal nor local (the API also runs causal calls with one query row this way): "
            "this flashbuild slice of flash-attn-3 compiles that branch out (causal on only); rebuild with: flashbuild "
            f"--source {fa3_tree} --profile flash-attn-3 --hdim 128 --dtype fp16 --arch sm90 --direction fwd "
            "--causal both --features none") in text
    assert "(feature local left out); rebuild with: " in text and "--causal on --features local\"" in text
    assert "(feature varlen left out)" in text and "--features varlen\"" in text


def test_every_instantiation_tu_includes_the_overlay_before_the_launch_template(fa3_tree):
    plan = plan_for(fa3_tree, hdim=64, dtype="fp16", causal="on", features="softcap")
    texts = texts_of(plan)
    for unit in plan.units:
        if unit.source is None:
            text = texts[f"{unit.name}.cu"]
            launch = f'#include "flash_{unit.direction}_launch_template.h"'
            assert text.index('#include "flashbuild_switches.h"') < text.index(launch), unit.name
    config = texts["flash_attn_config.py"]
    assert '"FLASHATTENTION_DISABLE_LOCAL": True' in config and '"FLASHATTENTION_DISABLE_VARLEN": True' in config


@pytest.mark.parametrize("function, params, causal, features, why", [
    ("test_flash_attn_output", {"causal": True, "local": False, "seqlen_q": 128}, "on", [], None),
    ("test_flash_attn_output", {"causal": False, "local": False, "seqlen_q": 128}, "on", [],
     "compiled-out switch branch: not causal"),
    # one query row: the API drops causal, so the case needs the not-causal branch
    ("test_flash_attn_output", {"causal": True, "local": False, "seqlen_q": 1}, "on", [],
     "compiled-out switch branch: not causal"),
    ("test_flash_attn_output", {"causal": True, "local": True, "seqlen_q": 128}, "on", [],
     "compiled-out switch branch: local"),
    ("test_flash_attn_output", {"causal": True, "local": True, "seqlen_q": 128}, "on", ["local"], None),
    ("test_flash_attn_varlen_output", {"causal": True, "local": False, "seqlen_q": 128}, "on", [],
     "compiled-out switch branch: varlen"),
    ("test_flash_attn_varlen_output", {"causal": False, "local": False, "seqlen_q": 128}, "both", ["varlen"], None),
    ("test_flash_attn_output", {"causal": False, "has_qv": True, "seqlen_q": 128}, "both", [],
     "compiled-out switch branch: qv"),
])
def test_the_plugin_deselects_cases_that_need_a_compiled_out_branch(function, params, causal, features, why):
    manifest = {"key": "k", "profile": "flash-attn-3",
                "selection": {"hdim": [128], "dtype": ["fp16"], "causal": causal, "features": features}}
    assert pytest_slice.serves({"d": 128, "dtype": "torch.float16", **params}, manifest, FA3, function) == why


FAKE_SWITCH_TREE = {
    "static_switch.h": """#pragma once
#define BOOL_SWITCH(COND, CONST_NAME, ...) [&] { if (COND) { constexpr static bool CONST_NAME = true; return __VA_ARGS__(); } \\
  else { constexpr static bool CONST_NAME = false; return __VA_ARGS__(); } }()
#define VARLEN_SWITCH BOOL_SWITCH
#define APPENDKV_SWITCH BOOL_SWITCH
#define CLUSTER_SWITCH BOOL_SWITCH
#define CAUSAL_LOCAL_SWITCH(CAUSAL_COND, LOCAL_COND, CAUSAL_CONST_NAME, LOCAL_CONST_NAME, ...) [&] { \\
  if (CAUSAL_COND) { constexpr static bool CAUSAL_CONST_NAME = true; constexpr static bool LOCAL_CONST_NAME = false; return __VA_ARGS__(); } \\
  else if (LOCAL_COND) { constexpr static bool CAUSAL_CONST_NAME = false; constexpr static bool LOCAL_CONST_NAME = true; return __VA_ARGS__(); } \\
  else { constexpr static bool CAUSAL_CONST_NAME = false; constexpr static bool LOCAL_CONST_NAME = false; return __VA_ARGS__(); } }()
""",
    "launch.h": """#pragma once
#include "static_switch.h"
#include <string>
template <bool C, bool L, bool V, bool Q, bool U> std::string kernel() {
  return std::to_string(C) + std::to_string(L) + std::to_string(V) + std::to_string(Q) + std::to_string(U);
}
template <int N> std::string launch(bool causal, bool local, bool varlen, bool qv, bool cluster) {
  std::string out;
  CAUSAL_LOCAL_SWITCH(causal, local, Is_causal, Is_local, [&] {
    VARLEN_SWITCH(varlen, Varlen, [&] {
      BOOL_SWITCH(qv, HasQV_, [&] {
        CLUSTER_SWITCH(cluster, Use_cluster, [&] { out = kernel<Is_causal, Is_local, Varlen, HasQV_, Use_cluster>(); });
      });
    });
  });
  return out;
}
""",
    "main.cpp": """#include "flashbuild_switches.h"
#include "launch.h"
#include <cstdio>
#include <stdexcept>
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    try {
      std::printf("%s\\n", launch<0>(a[0] == '1', a[1] == '1', a[2] == '1', a[3] == '1', a[4] == '1').c_str());
    } catch (const std::runtime_error& e) {
      std::printf("error: %s\\n", e.what());
    }
  }
}
""",
}


@pytest.mark.skipif(not __import__("shutil").which("g++"), reason="no g++ to compile the overlay's host code")
def test_the_narrowed_macros_run_the_kept_branches_and_name_the_fix_for_the_others(fa3_tree, tmp_path):
    """The overlay with a switch header shaped like the tree's (host code only, g++): a causal-only slice
    runs its kernel for causal calls, and any other call raises the slice's error instead of a kernel."""
    plan = plan_for(fa3_tree, hdim=128, dtype="fp16", direction="fwd", causal="on", features="none")
    for name, text in {**FAKE_SWITCH_TREE, "flashbuild_switches.h": texts_of(plan)["flashbuild_switches.h"]}.items():
        (tmp_path / name).write_text(text)
    exe = tmp_path / "a.out"
    subprocess.run(["g++", "-std=c++17", "-o", str(exe), str(tmp_path / "main.cpp")], check=True)
    # calls: causal; causal+cluster flag (runs the 1-CTA kernel); local; neither; causal varlen; causal qv
    lines = subprocess.run([str(exe), "10000", "10001", "01000", "00000", "10100", "10010"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert lines[:2] == ["10000", "10000"]
    assert lines[2].startswith("error: a call with a local window") and "--features local" in lines[2]
    assert lines[3].startswith("error: a call that is neither causal nor local") and "--causal both" in lines[3]
    assert lines[4].startswith("error: a varlen call") and "--features varlen" in lines[4]
    assert lines[5].startswith("error: a call with qv") and "--features qv" in lines[5]
    nm = subprocess.run(["nm", "-C", str(exe)], capture_output=True, text=True).stdout
    assert len(re.findall(r"kernel<", nm)) == 1  # one kernel instantiated: the others are compiled out


# ---------------------------------------------------------------- watch on a tree's slice

def test_watch_tests_the_variants_of_the_units_it_recompiled(fa3_tree):
    """A tree's watch round checks the variants of the TUs ninja ran (in a child process); an object of
    no kernel unit (the API, the stubs, the scheduler) means every variant."""
    from flashbuild.debug import watch

    plan = plan_for(fa3_tree, hdim="64,128", dtype="fp16", causal="on", features="none")
    manifest = {"profile": "flash-attn-3", "selection": {"hdim": [64, 128], "features": [], "causal": "on"},
                "units": [{"name": u.name, "direction": u.direction, "hdim": u.hdim, "dtype": u.dtype,
                           "causal": u.causal, "features": list(u.features), "archs": list(u.archs)}
                          for u in plan.units]}
    built = [Variant.from_name(n) for n in watch.TreeBuild(manifest).variants()]
    assert [v.name for v in built] == ["fwd_hdim64_fp16_causal_sm90", "fwd_hdim128_fp16_causal_sm90",
                                       "bwd_hdim64_fp16_causal_sm90", "bwd_hdim128_fp16_causal_sm90"]
    select = watch.tree_rebuilt_variants(manifest)
    assert [v.name for v in select(["flash_fwd_hdim128_fp16_sm90", "link"], built)] == ["fwd_hdim128_fp16_causal_sm90"]
    assert select(["flashbuild_prepare_scheduler"], built) == built
    assert select(["flash_fwd_hdim64_fp16_sm90"], built, test_all=True) == built

    rounds = iter([["flash_bwd_hdim64_fp16_sm90", "link"]])
    tested = []
    loop = watch.WarmLoop(build=lambda: type("R", (), {"timings": next(rounds, [])})(),
                          load=lambda result: watch.TreeBuild(manifest),
                          test=lambda module, variants: tested.append([v.name for v in variants]) or
                          [watch.checking_row({"variant": v.name, "status": "pass"}) for v in variants],
                          select=select)
    loop.module = watch.TreeBuild(manifest)
    loop.tested_objects = {"x": 1}
    done = loop.round(["hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp"], saved=0.0)
    assert tested == [["bwd_hdim64_fp16_causal_sm90"]] and done.result == "pass" and done.checks == 1
    assert "save->verdict" in done.line()


def test_checks_a_causal_only_slice_cannot_serve_are_skips_naming_why():
    """flash-attn 3's API runs a causal call with one query row not causal: on a --causal on slice the
    checks skip (and count) that shape instead of failing on the slice's error."""
    from flashbuild.debug import adapters, checking

    class Fake(adapters.FlashAttn3Slice):
        def __init__(self, causal):
            self.manifest = {"selection": {"causal": causal}}

    one_query = checking.Shape(3, 1, 1023, 8, 1)
    variant = Variant.from_name("fwd_hdim128_fp16_causal_sm90")
    row = checking.check(Fake("on"), variant, one_query, seed=0)
    assert row.status == "skip" and "runs this causal call not causal" in row.skipped
    assert Fake("both").outside(variant, one_query) is None
    assert Fake("on").outside(variant, checking.Shape(2, 17, 17, 4, 4)) is None

    class Fa2(adapters.FlashAttn2Slice):  # flash-attn 2's split-KV checks split the keys, some append to the cache
        def __init__(self, features):
            self.manifest = {"profile": "flash-attn-2", "selection": {"causal": "both", "features": features}}

    splitkv = Variant.from_name("splitkv_hdim128_fp16_sm90")
    append = checking.Shape(2, 5, 700, 8, 2, cache=checking.CacheCase(5, "interleaved"))
    assert "needs feature split" in Fa2([]).outside(splitkv, checking.Shape(2, 17, 17, 4, 4))
    assert "needs feature appendkv" in Fa2(["split"]).outside(splitkv, append)
    assert Fa2(["split", "appendkv"]).outside(splitkv, append) is None
    assert Fa2([]).outside(Variant.from_name("fwd_hdim128_fp16_sm90"), append) is None
