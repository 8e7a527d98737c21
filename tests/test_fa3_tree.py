"""A real FlashAttention-3 tree (opt-in: FLASHBUILD_FA3_SOURCE, and FLASHBUILD_FA3_CUTLASS when its
csrc/cutlass is not checked out; skipped with the reason otherwise, so never in CI):
- the smallest slice (hdim 64, fp16, forward, no features) compiles through the profile with real nvcc
  for sm_90a (--compile-only: no GPU, no CUDA torch): one kernel TU plus the tree's scheduler kernel and
  the stubs; the tree is byte-for-byte unchanged afterwards (about 3 minutes and 6 GB on 2 cores);
- for three slices, the tree's API compiled with the build's flags needs exactly the slice's units and
  stubs: no undefined symbol at import (host compiler and the stubs only: under a minute)."""

from __future__ import annotations

import os
import re
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


def _symbols(obj, kinds: str) -> set[str]:
    """The kernel entry points (run_mha_*, prepare_varlen_num_blocks) nm lists in obj with these kinds."""
    import re

    listing = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in listing.splitlines():
        match = re.match(r"^\s*(?:[0-9a-f]+\s+)?([A-Za-z])\s+(.*)$", line)
        if match and match.group(1) in kinds and ("run_mha" in match.group(2) or "prepare_varlen" in match.group(2)):
            found.add(re.sub(r"\(.*", "", match.group(2)))
    return found


def _unit_symbol(unit) -> str:
    def b(value) -> str:
        return "true" if value else "false"
    t = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}[unit.dtype]
    if unit.direction == "bwd":
        return f"void run_mha_bwd_<90, {t}, {unit.hdim}, {b(unit.has('softcap'))}>"
    packgqa = unit.has("packgqa") or unit.has("paged") or unit.has("split")
    return (f"void run_mha_fwd_<90, {t}, {unit.hdim}, {unit.head_dim_v}, {b(unit.has('split'))}, {b(unit.has('paged'))}, "
            f"{b(unit.has('softcap'))}, {b(packgqa)}>")


@pytest.mark.parametrize("features, direction", [("none", "fwd"), ("softcap,hdimv", "fwd,bwd"),
                                                 ("paged,split,softcap,packgqa,hdimv", "fwd,bwd")])
def test_every_kernel_the_api_needs_is_a_unit_or_a_stub(tmp_path, monkeypatch, features, direction):
    """The tree's API (flash_api_stable.cpp, host compiler, the build's own flags and defines) against
    the slice: each kernel symbol it leaves undefined is one of the slice's units or one of its stubs
    (compiled here, seconds), and nothing else: no undefined symbol at import, no stub for a built
    kernel. The heavy kernel TUs are not compiled: their symbols are what the templates instantiate."""
    from flashbuild.pipeline import builder, graph, render, toolchain

    tree, cutlass = fa3_tree()
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(cutlass))
    selection, options = builder.parse_request(source=tree, profile="flash-attn-3", hdim=64, dtype="fp16", arch="sm90",
                                               direction=direction, features=features, compile_only=True,
                                               build_dir=tmp_path / "build")
    plan = builder.make_plan(selection, options)
    tools = builder.toolchain(plan)
    builder.prepare(plan)
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    (plan.build_dir / "obj").mkdir(exist_ok=True)
    render.write_if_different(plan.build_dir / "build.ninja", builder.ninja_text(plan, tools, None))
    stubs = subprocess.run(["ninja", "-C", str(plan.build_dir), "obj/flashbuild_missing.o"], capture_output=True, text=True)
    assert stubs.returncode == 0, stubs.stdout[-3000:]
    link = toolchain.torch_link_spec(plan)
    api = tmp_path / "flash_api_stable.o"
    compiled = subprocess.run([str(link.cxx), *graph.binding_flags(link, tools, plan.gen_dir), "-c",
                               str(link.api_sources[0]), "-o", str(api)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    needed = _symbols(api, "U")
    units = {_unit_symbol(u) for u in plan.units if u.source is None}
    stubbed = _symbols(plan.build_dir / "obj" / "flashbuild_missing.o", "TW")
    support = {"prepare_varlen_num_blocks"}
    if "split" in features:  # the tree's combine kernels (flash_fwd_combine.cu, a support TU of the slice)
        support |= {f"void run_mha_fwd_combine_<{t}, float, {k}>"
                    for t in ("float", "cutlass::bfloat16_t", "cutlass::half_t") for k in (64, 128)}
    assert needed - units - stubbed - support == set()
    assert (units | stubbed) - needed == set() and units & stubbed == set()
    assert len(stubbed) == len(plan.missing)


def preprocessed(tmp_path, unit_name: str, **request) -> str:
    """The TU `unit_name` of a slice, through its real compile command with -E instead of -c: what the
    tree's launch template expands to with the slice's overlay (a few seconds, no compile)."""
    import shlex

    from flashbuild.pipeline import builder, render, toolchain
    from flashbuild import env

    plan = builder.make_plan(*builder.parse_request(build_dir=tmp_path / "build", compile_only=True, **request))
    builder.prepare(plan)
    text = builder.ninja_text(plan, toolchain.toolchain(plan), None)
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    (plan.build_dir / "obj").mkdir(exist_ok=True)
    (plan.build_dir / "build.ninja").write_text(text)
    command = subprocess.run([str(env.find_ninja()), "-C", str(plan.build_dir), "-t", "commands",
                              f"obj/{unit_name}.o"], capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    args = shlex.split(command)
    depfile = args.index("-MD")
    del args[depfile:depfile + 3]                       # -MD -MF obj/NAME.o.d
    args[args.index("-c")] = "-E"
    args[args.index("-o") + 1] = str(tmp_path / "out.ii")
    subprocess.run(args, cwd=plan.build_dir, capture_output=True, text=True, check=True, timeout=600)
    return (tmp_path / "out.ii").read_text(errors="replace")


def test_the_overlay_reaches_the_trees_launch_template(tmp_path, monkeypatch):
    """The tree's flash_fwd_launch_template.h, preprocessed with the slice's flags: its switch sites expand
    the overlay's macros, so a causal-only slice binds Is_causal = true and nothing else (no local, no
    varlen, no append-KV, no cluster), and each other branch is the slice's error."""
    tree, cutlass = fa3_tree()
    monkeypatch.setenv("FLASHBUILD_FA3_CUTLASS", str(cutlass))
    text = preprocessed(tmp_path, "flash_fwd_hdim128_fp16_sm90", source=tree, profile="flash-attn-3", hdim=128,
                        dtype="fp16", arch="sm90", direction="fwd", causal="on", features="none")
    bound = set(re.findall(r"constexpr static bool (Is_causal|Is_local|Varlen|AppendKV|Use_cluster) = (true|false)", text))
    assert bound == {("Is_causal", "true"), ("Is_local", "false"), ("Varlen", "false"), ("AppendKV", "false"),
                     ("Use_cluster", "false")}
    assert "compiles that branch out (causal on only); rebuild with: flashbuild" in text
    everything = preprocessed(tmp_path / "all", "flash_fwd_hdim128_fp16_sm90", source=tree, profile="flash-attn-3",
                              hdim=128, dtype="fp16", arch="sm90", direction="fwd")
    bound = set(re.findall(r"constexpr static bool (Is_causal|Is_local|Varlen) = (true|false)", everything))
    assert bound == {(n, v) for n in ("Is_causal", "Is_local", "Varlen") for v in ("true", "false")}
    assert "flashbuild_switch::miss(\"" not in everything  # the default is the tree's own build
