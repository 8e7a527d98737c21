"""Rendering into tmp_path: file names, TU contents, narrowed switches, the table, write_if_different."""

from __future__ import annotations

import os
import re

import jinja2
import pytest

from flashbuild import __version__
from flashbuild.pipeline import render
from flashbuild.selection.variants import select
from flashbuild.sources.units import variant_name

KEY = "sm90-fp16-h64-fwd-c01-0123abcd"


def render_selection(tmp_path, **kwargs):
    selection = select(**kwargs)
    paths = render.render_build(selection, tmp_path, build_key=KEY)
    return selection, {p.name: p.read_text() for p in paths}


def switch_body(header: str, macro: str) -> str:
    """The lines of one #define ... }() macro."""
    match = re.search(rf"#define {macro}\(.*?\}}\(\)\n", header, re.S)
    assert match, f"{macro} missing"
    return match.group(0)


def test_one_tu_per_variant_named_after_it(tmp_path):
    selection, files = render_selection(tmp_path, hdim="64,128", dtype="fp16", arch="sm90", causal="both")
    tus = sorted(name for name in files if name.endswith(".cu"))
    variants = [f"{d}_hdim{h}_fp16{c}_sm90{f}" for d in ("fwd", "bwd", "splitkv") for h in (64, 128)
                for c in ("", "_causal") for f in ("", "_local_softcap")]
    # sm90's Hopper kernels, device-only, each in a TU of its own: every forward's (and the 128-key kernel of the
    # plain non-causal hdim-128 forward, whose main kernel takes 176-key tiles), and every backward's main
    # kernel and its deterministic instantiation
    kernels = [f"{v}_kernel" for v in variants if v.startswith("fwd")] + ["fwd_hdim128_fp16_sm90_kernel_keys128"]
    kernels += [f"{v}_{part}" for v in variants if v.startswith("bwd") for part in ("kernel", "kernel_ordered")]
    # and split-KV's forward kernel (one split or several) and its decode tile (head dims 64 and 128)
    kernels += [f"{v}_{part}" for v in variants if v.startswith("splitkv") for part in ("kernel", "kernel_decode")]
    # and, for the plain non-causal hdim-64 split-KV variant, the decode tile over pairs of K/V heads
    kernels += ["splitkv_hdim64_fp16_sm90_kernel_decode_pairs"]
    assert tus == sorted(f"{name}.cu" for name in variants + kernels)
    assert not [name for name in tus if "fallback" in name]  # no Ampere-path kernel beside a Hopper one
    assert sorted(os.listdir(tmp_path)) == sorted(tus + ["flashbuild_dispatch.h", "flashbuild_table.h"])
    narrowed = select(hdim="64,128", dtype="fp16", arch="sm90", causal="both", features=[])
    assert len([n for n in render.render_texts(narrowed, build_key=KEY) if n.endswith(".cu")]) == 12 + 1 + 4 + 8 + 4 + 4 + 1


@pytest.mark.parametrize("kwargs, name, args", [
    (dict(hdim=64, dtype="fp16", arch="sm90", causal="on"), "fwd_hdim64_fp16_causal_sm90",
     "90, 64, flashbuild::DType::kFp16, true"),
    (dict(hdim=256, dtype="bf16", arch="sm80", causal="off"), "fwd_hdim256_bf16_sm80",
     "80, 256, flashbuild::DType::kBf16, false"),
    (dict(hdim=32, dtype="bf16", arch="sm86", causal="off"), "fwd_hdim32_bf16_sm86",
     "86, 32, flashbuild::DType::kBf16, false"),
    (dict(hdim=128, dtype="fp16", arch="sm90", causal="on"), "bwd_hdim128_fp16_causal_sm90",
     "90, 128, flashbuild::DType::kFp16, true"),
    (dict(hdim=96, dtype="bf16", arch="sm80", causal="off"), "bwd_hdim96_bf16_sm80",
     "80, 96, flashbuild::DType::kBf16, false"),
])
def test_tu_holds_the_explicit_instantiation(tmp_path, kwargs, name, args):
    _, files = render_selection(tmp_path, **kwargs)
    for suffix, mask in (("", 0), ("_local_softcap", 3)):  # the plain TU and its feature TU
        text = files[f"{name}{suffix}.cu"]
        direction = name.split("_", 1)[0]
        family = "hopper" if direction in ("fwd", "bwd") and name.endswith("_sm90") else "ampere"  # sm90: Hopper
        # The Hopper backward's small kernels compile in its group's first TU (here the plain one).
        small_kernels = family == "hopper" and direction == "bwd" and not suffix
        assert re.findall(r'#include "([^"]+)"', text) == [f"{family}/{direction}_launch.h"] + \
            (["hopper/bwd_small_kernels.h"] if small_kernels else [])
        instantiation = re.sub(r"\s+", " ", text[text.index("template void"):]).strip()
        params = {"fwd": "FwdParams", "bwd": "BwdParams"}[direction]
        # A Hopper launch TU that compiles no small kernels is host code alone: all of it hidden from nvcc's device
        # pass. Every Hopper launch reaches its main kernels through fatbins (the kernel TUs).
        host_only = family == "hopper" and not small_kernels
        split = family == "hopper"
        assert instantiation == (f"template void flashbuild::run_{direction}<{args}, {mask}>( "
                                 f"const flashbuild::{params}&, cudaStream_t);" + (" #endif" if host_only else ""))
        assert ("#if !defined(__CUDA_ARCH__)\n" in text) == host_only
        assert ("KernelHandle::from_fatbin(" in text) == split
        assert len(text.splitlines()) <= (45 if split else 15)


def test_a_variant_with_no_hopper_kernel_has_one_tu_on_the_ampere_launch_header(tmp_path):
    """Head dim 32 has a Hopper forward (and its kernel TU) but no Hopper backward tile."""
    _, files = render_selection(tmp_path, hdim=32, dtype="fp16", arch="sm90", causal="off", features=[])
    assert sorted(n for n in files if n.endswith(".cu") and not n.startswith("splitkv")) == [
        "bwd_hdim32_fp16_sm90.cu", "fwd_hdim32_fp16_sm90.cu", "fwd_hdim32_fp16_sm90_kernel.cu"]
    assert re.findall(r'#include "([^"]+)"', files["fwd_hdim32_fp16_sm90.cu"]) == ["hopper/fwd_launch.h"]
    assert re.findall(r'#include "([^"]+)"', files["bwd_hdim32_fp16_sm90.cu"]) == ["ampere/bwd_launch.h"]


@pytest.mark.parametrize("features, suffix, mask", [
    (["local"], "_local", 1), (["softcap"], "_softcap", 2), (["local", "softcap"], "_local_softcap", 3), ([], "", 0),
])
def test_every_instantiation_passes_its_features_mask_last(tmp_path, features, suffix, mask):
    selection, files = render_selection(tmp_path, hdim=64, dtype="bf16", arch="sm80", causal="on", features=features)
    assert len(selection.variants) == (2 if features else 1) * 3
    for variant in selection.variants:
        text = re.sub(r"\s+", " ", files[f"{variant.name}.cu"])
        args = re.search(rf"flashbuild::run_{variant.direction}<([^>]*)>", text).group(1)
        assert [a.strip() for a in args.split(",")] == [
            "80", "64", "flashbuild::DType::kBf16", "true", str(variant.features_mask)]
        assert variant.features_mask == (mask if variant.features else 0)
        assert variant.name.endswith(f"_sm80{suffix if variant.features else ''}")


def test_dispatch_and_table_get_the_features_axis(tmp_path, monkeypatch):
    """What render_texts gives dispatch.h.j2 and build_table.h.j2: features, features_mask, feature_suffix."""
    seen = {}
    real = render._render

    def spy(template, target, **context):
        seen[template] = context
        return real(template, target, **context)

    monkeypatch.setattr(render, "_render", spy)
    for features, mask, suffix in [(None, 3, "_local_softcap"), (["softcap"], 2, "_softcap"), ("local", 1, "_local"),
                                   ([], 0, "")]:
        render.render_texts(select(hdim=64, dtype="fp16", arch="sm90", features=features), build_key=KEY)
        for template in ("dispatch.h.j2", "build_table.h.j2"):
            context = seen[template]
            assert context["features_mask"] == mask and context["feature_suffix"] == suffix, (template, features)
            assert context["features"] == [f for f in ("local", "softcap") if f in suffix]


def test_every_generated_file_starts_with_the_generated_line(tmp_path):
    _, files = render_selection(tmp_path, hdim=64, dtype="fp16", arch="sm90", direction="fwd", causal="off")
    assert files["fwd_hdim64_fp16_sm90.cu"].splitlines()[0] == (
        f"// Generated by flashbuild {__version__} from templates/fwd_instantiate.cu.j2 "
        "for fwd_hdim64_fp16_sm90. Do not edit.")
    for name in ("flashbuild_dispatch.h", "flashbuild_table.h"):
        first = files[name].splitlines()[0]
        assert first.startswith(f"// Generated by flashbuild {__version__} from templates/")
        assert "for selection fwd x hdim 64 x fp16 x causal off x sm90 x features local,softcap. Do not edit." in first


def test_narrowed_switches_hold_exactly_the_selected_values_and_the_miss_branch(tmp_path):
    _, files = render_selection(tmp_path, hdim="64,256", dtype="bf16", arch="sm80,sm90", causal="on")
    header = files["flashbuild_dispatch.h"]
    assert "#pragma once" in header and '#include "common/params.h"' in header
    assert "[[noreturn]] void switch_miss(const char* axis, long value);" in header

    hdim = switch_body(header, "HEADDIM_SWITCH")
    assert re.findall(r"kHeadDim = (\d+);", hdim) == ["64", "256"]
    assert re.findall(r"if \(\(HEADDIM\) == (\d+)\)", hdim) == ["64", "256"]
    arch = switch_body(header, "ARCH_SWITCH")
    assert re.findall(r"kArch = (\d+);", arch) == ["80", "90"]
    dtype = switch_body(header, "FP16_SWITCH")
    assert "kBf16" in dtype and "kFp16" not in dtype and "if (!(IS_FP16))" in dtype
    causal = switch_body(header, "CAUSAL_SWITCH")
    assert re.findall(r"kIsCausal = (\w+);", causal) == ["true"]
    for macro, axis, value in [(hdim, "hdim", "HEADDIM"), (arch, "arch", "ARCH"), (dtype, "dtype", "IS_FP16"),
                               (causal, "causal", "IS_CAUSAL")]:
        assert macro.rstrip().endswith(f'flashbuild::switch_miss("{axis}", (long)({value})); }}()')
        assert macro.count("return __VA_ARGS__();") == len(re.findall(r"constexpr static", macro))
    for value in ("32", "96", "128", "192"):
        assert f"== {value})" not in header


def test_fp16_only_build_has_no_bf16_branch(tmp_path):
    _, files = render_selection(tmp_path, hdim=64, dtype="fp16", arch="sm90", causal="both")
    dtype = switch_body(files["flashbuild_dispatch.h"], "FP16_SWITCH")
    assert "if (IS_FP16) { constexpr static flashbuild::DType kDType = flashbuild::DType::kFp16;" in dtype
    assert "kBf16" not in dtype
    causal = switch_body(files["flashbuild_dispatch.h"], "CAUSAL_SWITCH")
    assert re.findall(r"kIsCausal = (\w+);", causal) == ["false", "true"]


def test_table_holds_the_variants_and_axes(tmp_path):
    selection, files = render_selection(tmp_path, hdim=64, dtype="fp16", arch="sm90", direction="fwd", causal="both",
                                        features=[])
    table = files["flashbuild_table.h"]
    assert "#define FLASHBUILD_HAS_FWD 1" in table
    # Internal linkage: `inline constexpr` arrays are GNU_UNIQUE symbols, bound process-wide, and a
    # second build loaded in one process read the first one's table (seen on the H200).
    assert "inline constexpr" not in table
    assert "#define FLASHBUILD_HAS_BWD 0" in table and "#define FLASHBUILD_HAS_SPLITKV 0" in table
    assert ('static constexpr const char* kVariants[] = {"fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90"};'
            in table)
    assert "static constexpr int kNumVariants = 2;" in table
    assert "static constexpr int kHeadDims[] = {64};" in table and "kNumHeadDims = 1;" in table
    assert "static constexpr int kArchs[] = {90};" in table
    assert 'static constexpr const char* kDTypes[] = {"fp16"};' in table
    assert "static constexpr bool kCausal[] = {false, true};" in table and "kNumCausal = 2;" in table
    assert 'static constexpr const char* kDirections[] = {"fwd"};' in table
    assert f'static constexpr const char* kBuildKey = "{KEY}";' in table
    assert f'static constexpr const char* kVersion = "{__version__}";' in table
    assert len(selection.variants) == 2
    assert 'static constexpr const char* kDeterministicPlain[] = {""};' in table  # no backward
    assert "static constexpr int kNumDeterministicPlain = 0;" in table


def test_table_lists_the_backwards_whose_plain_kernel_is_deterministic(tmp_path):
    """The Hopper backward (sm90, head dims 64-256, the plain variant) orders its dQ adds itself, so the
    binding keeps a deterministic call there; head dim 32, the feature variants and sm80 take the mode on
    the feature kernel (the Ampere path)."""
    _, files = render_selection(tmp_path, hdim="32,128", dtype="bf16", arch="sm80,sm90", direction="bwd",
                                causal="both")
    table = files["flashbuild_table.h"]
    assert ('static constexpr const char* kDeterministicPlain[] = {"bwd_hdim128_bf16_sm90", '
            '"bwd_hdim128_bf16_causal_sm90"};' in table), table
    assert "static constexpr int kNumDeterministicPlain = 2;" in table


def test_write_if_different_leaves_an_unchanged_file_alone(tmp_path):
    path = tmp_path / "sub" / "f.h"
    assert render.write_if_different(path, "one\n") is True
    old = os.stat(path).st_mtime_ns
    os.utime(path, ns=(old - 10**9, old - 10**9))  # make an accidental rewrite visible
    before = os.stat(path).st_mtime_ns
    assert render.write_if_different(path, "one\n") is False
    assert os.stat(path).st_mtime_ns == before
    assert render.write_if_different(path, "two\n") is True
    assert path.read_text() == "two\n" and os.stat(path).st_mtime_ns != before
    assert [p.name for p in path.parent.iterdir()] == ["f.h"]  # no temporary files left


def test_rerendering_the_same_selection_rewrites_nothing(tmp_path):
    selection = select(hdim=64, dtype="fp16", arch="sm90")
    paths = render.render_build(selection, tmp_path, build_key=KEY)
    stamps = {p: os.stat(p).st_mtime_ns for p in paths}
    for p in paths:
        os.utime(p, ns=(stamps[p] - 10**9, stamps[p] - 10**9))
    stamps = {p: os.stat(p).st_mtime_ns for p in paths}
    render.render_build(selection, tmp_path, build_key=KEY)
    assert {p: os.stat(p).st_mtime_ns for p in paths} == stamps
    assert render.up_to_date(selection, tmp_path, build_key=KEY)
    assert not render.up_to_date(selection, tmp_path, build_key="another-key")


def test_templates_fail_loudly_on_undefined_names_and_unsafe_values():
    environment = render.environment()
    assert environment.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        environment.from_string("{{ not_defined }}").render()
    with pytest.raises(TypeError):
        environment.from_string("{{ x|cpp }}").render(x="64; system(rm)")
    with pytest.raises(TypeError):
        environment.from_string("{{ x|cpp_str }}").render(x='a"; evil')


def test_a_hopper_forward_kernel_tu_and_its_launch_meet_at_one_symbol(tmp_path):
    """The kernel TU instantiates the launch's entry (so the kernel) and, compiled as host C++ with
    FLASHBUILD_EMBED_FATBIN, embeds its fatbin under the symbol the variant's TU specializes the entry to."""
    _, files = render_selection(tmp_path, hdim=96, dtype="bf16", arch="sm90", causal="on", features=["softcap"])
    name = "fwd_hdim96_bf16_causal_sm90_softcap"
    kernel, launch = files[f"{name}_kernel.cu"], files[f"{name}.cu"]
    entry = ("flashbuild::hopper::FwdKernelEntry< flashbuild::hopper::VariantTraits<96, flashbuild::DType::kBf16, "
             "true, 2>, true, 2>")
    symbol = f"flashbuild_fatbin_{name}_kernel"
    assert f"template struct {entry};" in re.sub(r"\s+", " ", kernel)
    assert f'".incbin \\"obj/{name}_kernel.o.fatbin\\"\\n"' in kernel and f'"{symbol}:\\n"' in kernel
    assert kernel.index("#if defined(FLASHBUILD_EMBED_FATBIN)") < kernel.index(".incbin") < kernel.index("#else") \
        < kernel.index('#include "hopper/fwd_kernel.h"')
    assert f'extern "C" const unsigned char {symbol}[];' in launch
    assert f"const flashbuild::KernelHandle& {entry}::get() {{" in re.sub(r"\s+", " ", launch).replace("< ", "< ")
    assert f'KernelHandle::from_fatbin({symbol}, "{name}_kernel")' in launch


def test_a_hopper_backward_entry_carries_its_features_mask(tmp_path):
    """The backward's kernel TUs instantiate BwdKernelEntry<Traits, causal, features_mask, ordered> and the
    variant's TU specializes the same entry to their fatbins: a feature mask left out of either side would
    name another kernel (or none)."""
    selection, files = render_selection(tmp_path, hdim=96, dtype="bf16", arch="sm90", causal="on",
                                        features=["local", "softcap"])
    kernel_tus = [name[:-3] for name in files
                  if name.startswith("bwd") and name.endswith(("_kernel.cu", "_kernel_ordered.cu"))]
    assert kernel_tus
    for unit in kernel_tus:
        name, ordered = variant_name(unit), "true" if unit.endswith("_ordered") else "false"
        (variant,) = [v for v in selection.variants if v.name == name]
        entry = ("flashbuild::hopper::BwdKernelEntry< flashbuild::hopper::BwdVariantTraits<96, "
                 f"flashbuild::DType::kBf16, true>, true, {variant.features_mask}, {ordered}>")
        assert f"template struct {entry};" in re.sub(r"\s+", " ", files[f"{unit}.cu"]), unit
        assert f"const flashbuild::KernelHandle& {entry}::get() {{" in re.sub(r"\s+", " ", files[f"{name}.cu"]), unit


def test_one_launch_tu_per_head_dim_and_dtype_compiles_the_shared_small_kernels(tmp_path):
    # The backward's dsum and dQ conversion and split-KV's append and combine are the same for every variant of a
    # head dim and dtype: the group's first launch TU includes its family's small-kernel header and instantiates
    # them, the others include none of their code and name the TU that does.
    _, files = render_selection(tmp_path, hdim="64,128", dtype="fp16,bf16", arch="sm90", causal="both")
    hosts = {}
    for name, text in files.items():
        if not name.endswith(".cu") or name.endswith(("_kernel.cu", "_kernel_ordered.cu", "_kernel_decode.cu", "_kernel_decode_pairs.cu")):
            continue
        direction = name.split("_")[0]
        includes = re.findall(r'#include "([^"]+)"', text)
        header = {"bwd": "hopper/bwd_small_kernels.h", "splitkv": "hopper/splitkv_small_kernels.h"}.get(direction)
        if header is None:  # the forward has no small kernels
            assert not [i for i in includes if i.endswith("_small_kernels.h")] and "small kernels" not in text, name
            continue
        group = re.sub(r"_causal|_local_softcap", "", name[:-len(".cu")])
        if header in includes:
            assert group not in hosts, f"{name} and {hosts.get(group)} both compile {group}'s small kernels"
            hosts[group] = name[:-len(".cu")]
            assert re.search(r"template struct flashbuild::hopper::(Bwd|SplitKV)SmallKernels<", text)
        else:
            match = re.search(r"The small kernels this launch uses compile in (\w+)\.cu", text)
            assert match and match.group(1) == group, name  # the group's first variant: non-causal, plain
    assert sorted(hosts) == sorted(f"{d}_hdim{h}_{t}_sm90" for d in ("bwd", "splitkv") for h in (64, 128)
                                   for t in ("fp16", "bf16"))
    assert all(hosts[g] == g for g in hosts)
    # With only causal variants selected, the group's first variant is a causal one.
    _, files = render_selection(tmp_path / "causal", hdim="64", dtype="fp16", arch="sm90", causal="on",
                                direction="bwd", features=[])
    assert "hopper/bwd_small_kernels.h" in files["bwd_hdim64_fp16_causal_sm90.cu"]


def test_head_dims_on_the_ampere_path_compile_their_own_small_kernels(tmp_path):
    # sm90's backward at hdim 32 and split-KV at 192/256 run the Ampere path: one TU each, with its small kernels.
    _, files = render_selection(tmp_path, hdim="32,256", dtype="fp16", arch="sm90", causal="both",
                                direction="bwd,splitkv", features=[])
    for name in ("bwd_hdim32_fp16_sm90.cu", "bwd_hdim32_fp16_causal_sm90.cu", "splitkv_hdim256_fp16_sm90.cu",
                 "splitkv_hdim256_fp16_causal_sm90.cu"):
        assert "_small_kernels.h" not in files[name] and "compile in" not in files[name], name
    assert "hopper/bwd_small_kernels.h" in files["bwd_hdim256_fp16_sm90.cu"]
