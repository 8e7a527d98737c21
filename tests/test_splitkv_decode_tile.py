"""The split-KV decode tile's selection rule, without a GPU: the variants that get a <variant>_kernel_decode.cu TU
(selection/families.py, has_decode_tile) are those whose launch can run the decode tile (kernels/hopper/
splitkv_decode_traits.h, decode_tile_head_dim: the launch only reaches DecodeTileEntry where that holds, and the
entry's `get` is defined only in that TU), and that TU names the entry the launch TU specializes."""

from __future__ import annotations

import re
from pathlib import Path

from flashbuild.pipeline import render
from flashbuild.selection.families import has_decode_tile
from flashbuild.selection.variants import select

TRAITS = Path(__file__).resolve().parents[1] / "kernels" / "hopper" / "splitkv_decode_traits.h"


def render_selection(tmp_path, **kwargs):
    paths = render.render_build(select(**kwargs), tmp_path, build_key="sm90-bf16-h64-splitkv-c1-0123abcd")
    return {p.name: p.read_text() for p in paths}


def cpp_head_dims() -> set[int]:
    """The head dims decode_tile_head_dim accepts, read from its `head_dim == N || ...` body."""
    body = re.search(r"constexpr bool decode_tile_head_dim\(int head_dim\) \{ return ([^;]+); \}", TRAITS.read_text())
    assert body, "decode_tile_head_dim's one-line body changed: update this test's reading of it"
    terms = body.group(1).split("||")
    assert all(re.fullmatch(r"\s*head_dim == \d+\s*", t) for t in terms), body.group(1)
    return {int(re.search(r"\d+", t).group()) for t in terms}


def test_the_decode_tile_tus_are_the_kernels_rule():
    assert cpp_head_dims() == {64, 128}
    for variant in select(hdim="32,64,96,128", dtype="fp16", arch="sm90", direction="splitkv", causal="both").variants:
        parts = [k.part for k in variant.kernel_tus]
        assert ("kernel_decode" in parts) == (variant.hdim in cpp_head_dims()) == has_decode_tile(variant), variant.name


def test_the_launch_tu_specializes_the_entry_its_decode_tu_instantiates(tmp_path):
    files = render_selection(tmp_path, hdim="64,96", dtype="bf16", arch="sm90", direction="splitkv", causal="on",
                                features=[])
    assert "splitkv_hdim96_bf16_causal_sm90_kernel_decode.cu" not in files
    entry = re.search(r"template struct (flashbuild::hopper::DecodeTileEntry<[^;]+>);",
                      files["splitkv_hdim64_bf16_causal_sm90_kernel_decode.cu"])
    assert entry and "DecodeTileBase<64, flashbuild::DType::kBf16>, true" in entry.group(1)
    assert '#include "hopper/splitkv_decode_kernel.h"' in files["splitkv_hdim64_bf16_causal_sm90_kernel_decode.cu"]
    launch = files["splitkv_hdim64_bf16_causal_sm90.cu"]
    assert f"const flashbuild::KernelHandle& {entry.group(1)}::get()" in launch
    assert "flashbuild_fatbin_splitkv_hdim64_bf16_causal_sm90_kernel_decode" in launch


LAUNCH = TRAITS.with_name("splitkv_decode_launch.h")


def test_the_pairs_tu_is_the_kernels_rule():
    # kPairsVariant (splitkv_decode_launch.h): the variants whose launch reaches the pairs' entry; has_decode_pairs
    # (selection/families.py) gives them the TU that defines it.
    rule = re.search(r"inline constexpr bool kPairsVariant = ([^;]+);", LAUNCH.read_text())
    assert rule and rule.group(1) == "kHeadDim == 64 && !kIsCausal && (kFeatures & kAllFeatures) == 0", \
        "kPairsVariant changed: update has_decode_pairs and this test"
    seen = set()
    for variant in select(hdim="32,64,96,128", dtype="fp16", arch="sm90", direction="splitkv", causal="both").variants:
        paired = "kernel_decode_pairs" in [k.part for k in variant.kernel_tus]
        assert paired == (variant.hdim == 64 and not variant.causal and not variant.features), variant.name
        seen.add(paired)
    assert seen == {True, False}


def test_the_launch_tu_specializes_the_pairs_entry(tmp_path):
    files = render_selection(tmp_path, hdim="64", dtype="bf16", arch="sm90", direction="splitkv", causal="both",
                             features=[])
    assert "splitkv_hdim64_bf16_causal_sm90_kernel_decode_pairs.cu" not in files
    entry = re.search(r"template struct (flashbuild::hopper::DecodeTileEntry<[^;]+>);",
                      files["splitkv_hdim64_bf16_sm90_kernel_decode_pairs.cu"])
    assert entry and "DecodeTileBase<128, flashbuild::DType::kBf16>, false" in entry.group(1)
    assert "kPairedHeads" in entry.group(1)
    launch = files["splitkv_hdim64_bf16_sm90.cu"]
    assert f"const flashbuild::KernelHandle& {entry.group(1)}::get()" in launch
    assert "flashbuild_fatbin_splitkv_hdim64_bf16_sm90_kernel_decode_pairs" in launch
