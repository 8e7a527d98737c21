"""Source profiles without a compiler: reading and checking profile files, checking a tree's layout
against its profile, naming and rendering an upstream tree's slice (flash-attn 2: its TU names, the
narrowed static_switch.h overlay, the stubs for what the slice leaves out), the plan, and the pytest
plugin that runs a tree's own tests on a slice."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from flashbuild.pipeline import builder, render
from flashbuild.errors import SelectionError
from flashbuild.sources import profile as profiles, pytest_slice, tree_check, units
from helpers import REPO, run_cli

FA2 = profiles.load("flash-attn-2")


def fake_fa2_tree(base: Path) -> Path:
    """A tree with flash-attn 2's layout (empty files): enough to plan and render a slice."""
    root = base / "flash-attn-2.8.3"
    for rel in (*FA2.required, *FA2.api_sources, "csrc/cutlass/include/cutlass/cutlass.h"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.3"\n')  # the release the profile reads
    return root


@pytest.fixture
def fa2_tree(tmp_path) -> Path:
    return fake_fa2_tree(tmp_path)


def plan_for(tree: Path, **kwargs):
    kwargs.setdefault("arch", "sm90")
    return builder.make_plan(*builder.parse_request(source=tree, profile="flash-attn-2", **kwargs))


# ---------------------------------------------------------------- the profiles in configs/profiles

def test_the_builtin_profile_names_each_tu_as_its_variant():
    builtin = profiles.load("flashbuild")
    assert builtin.builtin and builtin.extension == "" and builtin.feature_mode == "variants"
    selection = builder.parse_request(hdim="64,128", dtype="fp16,bf16", arch="sm80,sm90")[0]
    tus = units.units(selection, builtin)
    assert [u.name for u in tus if not u.part] == [v.name for v in selection.variants]
    assert [u.name for u in tus if u.part == "kernel"] == [f"{v.name}_kernel" for v in selection.variants
                                                          if v.kernel_tu]
    assert [u.name for u in tus if u.part == "kernel_ordered"] == [f"{v.name}_kernel_ordered" for v in selection.variants
                                                                  if v.kernel_tu and v.direction == "bwd"]
    assert {v.name for v in selection.variants if v.kernel_tu} == {  # the Hopper kernels' and split-KV's
        v.name for v in selection.variants if v.family.name == "hopper" or v.direction == "splitkv"}
    assert all(u.archs == (u.variant.arch,) for u in tus)
    tree_check.check_tree(builtin, REPO)


def test_every_shipped_profile_reads():
    assert {"flashbuild", "flash-attn-2"} <= set(profiles.available())
    for name in profiles.available():
        profile = profiles.load(name)
        assert profile.instantiations.keys() == set(profile.directions)
        for inst in profile.instantiations.values():
            assert (REPO / "templates" / inst.template).is_file()
        for header in profile.generated:
            assert (REPO / "templates" / header.template).is_file()


BROKEN = [
    ("description = 5", "key description: expected a string, found 5"),
    ('description = "x"\n[tree]\n[extension]\n[axes]\nhdim = [64]\ndtype = ["fp16"]\ndirection = ["fwd"]\n'
     '[axes.gencode]\nsm90 = "-gencode arch=compute_90a,code=sm_90a"\n[instantiation.fwd]\nname = "x{bogus}"\n'
     'template = "t.j2"\n', "key instantiation.fwd.name: expected a pattern over"),
    ('description = "x"\n[tree]\n[extension]\n[axes]\nhdim = ["64"]\n', "key axes.hdim: expected a list of positive ints"),
    ('description = "x"\n[tree]\nrequired = ["/etc/passwd"]\n', "key tree.required: expected a list of paths relative"),
    ('description = "x"\n[tree]\nsurprise = 1\n', "unknown key tree.surprise"),
    ('description = "x"\n', "missing key tree"),
    ('description = "x"\n[tree]\n[extension]\n[axes]\nhdim = [64]\ndtype = ["fp16"]\ndirection = ["fwd"]\n'
     '[axes.gencode]\nsm90 = "-O3"\n', "key axes.gencode: expected entries like"),
    ('description = "x"\n[tree]\n[extension]\n[axes]\nhdim = [64]\ndtype = ["fp16"]\ndirection = ["fwd"]\n'
     '[axes.gencode]\nsm90 = "-gencode arch=compute_90a,code=sm_90a"\n[features]\nnames = ["local"]\n'
     'mode = "defines"\n', "key features.disable: expected a define for every feature"),
    ("this is = not toml [", "not valid TOML"),
]


@pytest.mark.parametrize("text, message", BROKEN)
def test_a_broken_profile_is_an_error_naming_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(SelectionError) as info:
        profiles.load(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_an_unknown_profile_lists_the_known_ones():
    result = run_cli("--source", ".", "--profile", "flash-attn-9", "--hdim", "64", "--dry-run")
    assert result.exit_code == 2
    assert "--profile flash-attn-9: no such profile" in result.stderr and "flash-attn-2" in result.stderr


# ---------------------------------------------------------------- a tree against its profile

def test_source_and_profile_go_together(fa2_tree):
    # Without --profile the tree names its profile and release (tests/test_releases.py has the rest).
    no_profile = run_cli("--source", str(fa2_tree), "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert no_profile.exit_code == 0 and "(profile flash-attn-2@2.8: " in no_profile.stdout
    no_source = run_cli("--profile", "flash-attn-2", "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert no_source.exit_code == 2 and "pass its root with --source PATH" in no_source.stderr


@pytest.mark.parametrize("remove, key", [
    ("csrc/flash_attn/src/flash_fwd_launch_template.h", "tree.required"),
    ("csrc/flash_attn/flash_api.cpp", "extension.sources"),
    ("csrc/cutlass/include/cutlass/cutlass.h", "tree.cutlass"),
])
def test_a_tree_that_does_not_match_its_profile_is_refused_before_compiling(fa2_tree, cache, remove, key):
    (fa2_tree / remove).unlink()
    result = run_cli("--source", str(fa2_tree), "--profile", "flash-attn-2", "--hdim", "64", "--arch", "sm90")
    assert result.exit_code == 2, result.output
    assert f"does not match profile flash-attn-2" in result.stderr and remove in result.stderr and key in result.stderr
    assert not cache.exists()  # nothing was built for nothing


def test_a_source_that_is_not_a_directory(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("")
    for source, why in ((a_file, "is a file"), (tmp_path / "none", "does not exist")):
        result = run_cli("--source", str(source), "--profile", "flash-attn-2", "--hdim", "64", "--dry-run")
        assert result.exit_code == 2 and why in result.stderr and "Traceback" not in result.output


def test_a_value_outside_the_trees_space_names_what_it_has(fa2_tree):
    result = run_cli("--source", str(fa2_tree), "--profile", "flash-attn-2", "--hdim", "64", "--arch", "sm90",
                     "--features", "local,fp8", "--dry-run")
    assert result.exit_code == 2 and "features fp8: not a feature" in result.stderr
    assert "dropout" in result.stderr  # the tree's own features are listed


# ---------------------------------------------------------------- flash-attn 2: names, overlay, stubs, plan

def test_fa2_tus_are_named_as_its_generate_kernels_names_them(fa2_tree):
    plan = plan_for(fa2_tree, hdim="64,128", dtype="fp16", direction="fwd,bwd,splitkv", causal="both")
    names = sorted(u.name for u in plan.units)
    assert names == sorted(f"flash_{d}_hdim{h}_fp16{c}_sm80" for d in ("fwd", "bwd", "fwd_split") for h in (64, 128)
                           for c in ("", "_causal"))
    assert all(u.archs == ("sm90",) for u in plan.units)
    assert plan.missing == ()  # every direction and causal value is built: no stubs
    two_archs = plan_for(fa2_tree, hdim=64, dtype="fp16", direction="fwd", causal="off", arch="sm80,sm90")
    assert [(u.name, u.archs) for u in two_archs.units] == [("flash_fwd_hdim64_fp16_sm80", ("sm80", "sm90"))]


def test_fa2_instantiation_tus_hold_the_trees_templates(fa2_tree):
    plan = plan_for(fa2_tree, hdim=64, dtype="bf16", direction="fwd,bwd,splitkv", causal="on")
    texts = render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
    flat = {name: re.sub(r"\s+", " ", text) for name, text in texts.items()}
    assert "run_mha_fwd_<cutlass::bfloat16_t, 64, true>(Flash_fwd_params& params, cudaStream_t stream) { " \
           "run_mha_fwd_hdim64<cutlass::bfloat16_t, true>(params, stream); }" in flat["flash_fwd_hdim64_bf16_causal_sm80.cu"]
    assert "run_mha_bwd_hdim64<cutlass::bfloat16_t, true>" in flat["flash_bwd_hdim64_bf16_causal_sm80.cu"]
    assert "template void run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 64, true>" in \
           flat["flash_fwd_split_hdim64_bf16_causal_sm80.cu"]
    for text in texts.values():
        assert text.startswith(f"// Generated by flashbuild ") and "Do not edit." in text.splitlines()[0]


def test_fa2_overlay_narrows_head_dim_and_dtype_and_names_the_fix(fa2_tree):
    plan = plan_for(fa2_tree, hdim="64,256", dtype="fp16", direction="fwd,bwd,splitkv", causal="both")
    overlay = render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                  context=builder.tree_context(plan))["static_switch.h"]
    assert '#include_next "static_switch.h"' in overlay
    switch = overlay[overlay.index("#define HEADDIM_SWITCH"):overlay.index("#undef FP16_SWITCH")]
    assert "(HEADDIM) > 32 && (HEADDIM) <= 64" in switch and "(HEADDIM) > 192 && (HEADDIM) <= 256" in switch
    assert "kHeadDim = 128" not in switch and "head_dim_miss(HEADDIM)" in switch
    fp16 = overlay[overlay.index("#define FP16_SWITCH"):]
    assert "cutlass::half_t" in fp16 and "bfloat16" not in fp16 and "dtype_miss(COND)" in fp16
    # a head dim served by the hdim-128 kernel: the message says so and how to add it, pasteable
    miss = re.search(r'if \(head_dim <= 128\) \{ why = "(.*?)"; \}', overlay).group(1)
    assert "runs on the hdim-128 kernel, which this flashbuild slice of flash-attn-2@2.8 does not hold" in miss
    assert "(it holds 64 (head dims 33-64), 256 (head dims 193-256))" in miss
    assert f"rebuild with: flashbuild --source {fa2_tree} --profile flash-attn-2@2.8 --hdim 64,128,256 --dtype fp16" in miss


def test_fa2_stubs_cover_what_the_dispatch_reaches_and_the_build_leaves_out(fa2_tree):
    plan = plan_for(fa2_tree, hdim=64, dtype="fp16", direction="fwd", causal="on")
    assert {(m.direction, m.causal) for m in plan.missing} == {
        ("fwd", False), ("bwd", False), ("bwd", True), ("splitkv", False), ("splitkv", True)}
    texts = render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
    stubs = texts[f"{render.MISSING_TU}.cu"]
    assert stubs.count("throw std::runtime_error(") == 5
    assert "void run_mha_bwd_<cutlass::half_t, 64, true>(Flash_bwd_params&, cudaStream_t)" in stubs
    assert "holds no backward kernel for head dim 64, fp16, causal" in stubs
    assert "--direction fwd,bwd --causal both" in stubs


def test_fa2_feature_switches_become_the_trees_defines(fa2_tree):
    plan = plan_for(fa2_tree, hdim=64, dtype="fp16", direction="fwd", causal="off", features="local,softcap")
    from flashbuild.pipeline import toolchain
    assert toolchain.feature_defines(plan) == ["-DFLASHATTENTION_DISABLE_DROPOUT", "-DFLASHATTENTION_DISABLE_ALIBI",
                                               "-DFLASHATTENTION_DISABLE_UNEVEN_K",
                                               # markers of the switch features (the overlay narrows them)
                                               "-DFLASHBUILD_NO_SWITCH_EVEN_MN", "-DFLASHBUILD_NO_SWITCH_SPLIT",
                                               "-DFLASHBUILD_NO_SWITCH_APPENDKV"]
    none = plan_for(fa2_tree, hdim=64, dtype="fp16", direction="fwd", causal="off", no_local=True, features="local")
    assert len(toolchain.feature_defines(none)) == 8
    assert plan.key != none.key and plan.key.startswith("flash-attn-2-2.8-sm90-fp16-h64-fwd-c0-fLS-")


def test_fa2_dry_run_shows_the_tree_units_stubs_and_link(fa2_tree):
    result = run_cli("--source", str(fa2_tree), "--profile", "flash-attn-2", "--hdim", "64", "--dtype", "fp16",
                     "--arch", "sm90", "--direction", "fwd", "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"tree       {fa2_tree} (profile flash-attn-2" in out
    assert re.search(r"flash_fwd_hdim64_fp16_sm80\.cu +from templates/profiles/flash-attn-2/fwd\.cu\.j2", out)
    assert "static_switch.h" in out and "-gencode arch=compute_90,code=sm_90" in out
    assert "stubs for 4 combinations" in out


def test_the_tree_is_never_written(fa2_tree, cache, monkeypatch):
    """Render and plan a build (ninja replaced): everything lands in the build dir, nothing in the tree."""
    before = {p: p.stat().st_mtime_ns for p in fa2_tree.rglob("*")}
    monkeypatch.setattr(builder, "run_ninja", lambda plan: (_ok(), {}))
    monkeypatch.setattr(builder, "torch_link_spec", lambda plan: None)
    selection, options = builder.parse_request(source=fa2_tree, profile="flash-attn-2", hdim=64, dtype="fp16",
                                               arch="sm90", direction="fwd", compile_only=True)
    monkeypatch.setattr(builder, "toolchain", lambda plan: _tools())
    result = builder.build(selection, options)
    assert {p: p.stat().st_mtime_ns for p in fa2_tree.rglob("*")} == before
    assert (result.build_dir / "generated" / "static_switch.h").is_file()
    manifest = json.loads((result.build_dir / "manifest.json").read_text())
    assert manifest["profile"] == "flash-attn-2@2.8" and manifest["source"]  # the release the tree is == str(fa2_tree)
    assert manifest["units"][0]["name"] == "flash_fwd_hdim64_fp16_sm80"


def _ok():
    from flashbuild.pipeline.ninja_output import NinjaOutput
    out = NinjaOutput()
    out.finish(0)
    return out


def _tools():
    from flashbuild.pipeline import graph
    return graph.Toolchain(nvcc=Path("/cuda/bin/nvcc"), include_dirs=(), gencodes=FA2.gencodes)


# ---------------------------------------------------------------- the tree's own tests on a slice

def manifest_for(hdims, dtypes, features):
    return {"key": "k", "profile": "flash-attn-2",
            "selection": {"hdim": hdims, "dtype": dtypes, "features": features}}


@pytest.mark.parametrize("params, features, why", [
    (dict(dtype="torch.float16", d=64), [], None),
    (dict(dtype="torch.float16", d=59), [], None),                     # padded to 64: even
    (dict(dtype="torch.float16", d=40), [], "head dim 40 needs uneven_k"),
    (dict(dtype="torch.float16", d=40), ["uneven_k"], None),
    (dict(dtype="torch.bfloat16", d=64), [], "dtype bf16"),
    (dict(dtype="torch.float16", d=128), [], "head dim 128 (the hdim-128 kernel)"),
    (dict(dtype="torch.float16", d=64, dropout_p=0.17), [], "dropout (dropout_p=0.17)"),
    (dict(dtype="torch.float16", d=64, dropout_p=0.0, local=True, softcap=0.0), ["local"], None),
    (dict(dtype="torch.float16", d=64, softcap=30.0), ["local"], "softcap (softcap=30.0)"),
])
def test_the_plugin_keeps_exactly_the_cases_the_slice_serves(params, features, why):
    assert pytest_slice.serves(params, manifest_for([64], ["fp16"], features), FA2) == why


# ---------------------------------------------------------------- switches narrowed inside each TU (flash-attn 2)

def fa2_overlay(plan) -> dict[str, list]:
    from test_fa3_profile import overlay_branches  # the same overlay template and reader
    texts = render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
    return overlay_branches(texts["flashbuild_switches.h"])


ON, OFF = {"CONST_NAME": True}, {"CONST_NAME": False}


def test_fa2_overlay_holds_exactly_the_selected_branches(fa2_tree):
    plan = plan_for(fa2_tree, hdim=128, dtype="fp16", direction="fwd", causal="on", features="none")
    assert fa2_overlay(plan) == {
        "LOCAL_SWITCH": ["miss", OFF], "SOFTCAP_SWITCH": ["miss", OFF], "DROPOUT_SWITCH": ["miss", OFF],
        "ALIBI_SWITCH": ["miss", OFF], "EVENK_SWITCH": [ON, "miss"],
        # is_even_MN: the bounds-checked kernel (false) serves every call when even_mn is left out
        "BOOL_SWITCH:IsEvenMNConst": [OFF, OFF], "BOOL_SWITCH:ReturnSoftmaxConst": ["miss", OFF],
        "BOOL_SWITCH:Split": ["miss", OFF], "BOOL_SWITCH:Append_KV": ["miss", OFF]}
    assert [u.name for u in plan.units] == ["flash_fwd_hdim128_fp16_causal_sm80"]  # causal is a TU axis
    default = plan_for(fa2_tree, hdim=128, dtype="fp16", direction="fwd")  # every feature: the tree's own build
    assert all(branches == [ON, OFF] or branches == [OFF, ON] for branches in fa2_overlay(default).values())
    some = plan_for(fa2_tree, hdim=128, dtype="fp16", direction="splitkv", features="uneven_k,split")
    branches = fa2_overlay(some)
    assert branches["EVENK_SWITCH"] == [ON, OFF] and branches["BOOL_SWITCH:Split"] == [ON, OFF]
    assert branches["BOOL_SWITCH:Append_KV"] == ["miss", OFF] and branches["BOOL_SWITCH:IsEvenMNConst"] == [OFF, OFF]


def test_fa2_tus_include_the_overlay_first_and_its_errors_name_the_fix(fa2_tree):
    plan = plan_for(fa2_tree, hdim=128, dtype="fp16", causal="on", features="none")
    texts = render.render_texts(plan.selection, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
    for unit in plan.units:
        text = texts[f"{unit.name}.cu"]
        assert text.index('#include "flashbuild_switches.h"') < text.index("_launch_template.h")
    overlay = texts["flashbuild_switches.h"]
    assert '#include "src/static_switch.h"' in overlay  # the very file the launch templates include (#pragma once)
    assert ("a split-KV call with num_splits > 1: this flashbuild slice of flash-attn-2@2.8 compiles that branch out "
            "(feature split left out); rebuild with: flashbuild") in overlay and "--features split\"" in overlay


@pytest.mark.parametrize("function, params, causal, features, why", [
    ("test_flash_attn_output", {"causal": True, "seqlen_q": 128}, "on", [], None),
    ("test_flash_attn_output", {"causal": False, "seqlen_q": 128}, "on", [], "compiled-out switch branch: not causal"),
    ("test_flash_attn_output", {"causal": True, "seqlen_q": 1}, "on", [], "compiled-out switch branch: not causal"),
    ("test_flash_attn_kvcache", {"causal": True, "seqlen_q": 128, "num_splits": 0, "new_kv": False}, "on", [],
     "compiled-out switch branch: split"),
    ("test_flash_attn_kvcache", {"causal": True, "seqlen_q": 128, "num_splits": 1, "new_kv": True}, "on", ["split"],
     "compiled-out switch branch: appendkv"),
    ("test_flash_attn_kvcache", {"causal": True, "seqlen_q": 128, "num_splits": 1, "new_kv": True}, "both",
     ["appendkv"], None),
])
def test_the_plugin_deselects_fa2_cases_that_need_a_compiled_out_branch(function, params, causal, features, why):
    manifest = {"key": "k", "profile": "flash-attn-2",
                "selection": {"hdim": [128], "dtype": ["fp16"], "causal": causal, "features": features}}
    assert pytest_slice.serves({"d": 128, "dtype": "torch.float16", **params}, manifest, FA2, function) == why


@pytest.mark.parametrize("table, message", [
    ('[[switches.macro]]\nname = "X_SWITCH"\nfeature = "nope"\ncall = "c"', "switches.macro[0].feature"),
    ('[[switches.macro]]\nname = "X_SWITCH"\nparams = ["A"]\nbranches = [{ when = "B", set = { A = true }, call = "c" }, '
     '{ set = { A = false }, call = "d" }]', "switches.macro[0].branches[0].when"),
    ('[[switches.macro]]\nname = "BOOL_SWITCH"\nsite = "X"\nfeature = "f"\ncall = "a\\nb"', "switches.macro[0].call"),
    ('bogus = 1', "unknown key switches.bogus"),
    ('[[switches.macro]]\nname = "X_SWITCH"\nfeature = "f"\ncall = "c"\ngeneral = 3', "switches.macro[0].general"),
    ('[[switches.macro]]\nname = "X_SWITCH"\nparams = ["A"]\nbranches = [{ when = "A", set = { A = 1 }, call = "c" }, '
     '{ set = { A = false }, call = "d" }]', "switches.macro[0].branches[0].set"),
])
def test_a_broken_switches_table_is_an_error_naming_the_key(tmp_path, table, message):
    text = FA2.path.read_text().split("\n[switches]\n")[0] + '\n[[generated]]\nfile = "o.h"\ntemplate = "t.j2"\n'
    path = tmp_path / "p.toml"
    path.write_text(text + '\n[switches]\nfeatures = ["f"]\nheader = "static_switch.h"\noverlay = "o.h"\n'
                    + (table if table.startswith("bogus") else "") + "\n" + ("" if table.startswith("bogus") else table))
    with pytest.raises(SelectionError, match=re.escape(message)):
        profiles.read_profile(path)


@pytest.mark.parametrize("header, overlay, message", [
    ('"../../etc/x.h"', '"o.h"', "switches.header"),
    ('"static_switch.h"', '"sub/o.h"', "switches.overlay"),
    ('"static_switch.h"', '"p.h"', "switches.overlay p.h is not rendered"),
])
def test_the_switch_headers_stay_inside_their_roots_and_the_overlay_is_rendered(tmp_path, header, overlay, message):
    text = FA2.path.read_text().split("\n[switches]\n")[0] + '\n[[generated]]\nfile = "o.h"\ntemplate = "t.j2"\n'
    path = tmp_path / "p.toml"
    path.write_text(text + f'\n[switches]\nfeatures = ["f"]\nheader = {header}\noverlay = {overlay}\n')
    with pytest.raises(SelectionError, match=re.escape(message)):
        profiles.read_profile(path)
