"""One description of the variant space (flashbuild/selection/space.py) and everything that spells it:
the Python side, the built-in profile, the checked-in C++ header kernels/common/variant_space.h, each
build's compiled-in table (flashbuild_table.h, parsed from a rendered build) and the binding, which
must spell no variant name, head dim list or feature bit itself. Each test derives what it expects
from space.py alone and fails when another place disagrees."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import pytest

from flashbuild.pipeline import render
from flashbuild.errors import SelectionError
from flashbuild.selection import space
from flashbuild.selection.variants import Variant, select
from flashbuild.sources import profile as profiles
from helpers import REPO

KERNELS = REPO / "kernels"
SPACE_HEADER = KERNELS / render.SPACE_HEADER
BINDING = KERNELS / "binding" / "flash_api.cpp"


def every_variant():
    """Every variant the space describes: each direction, head dim, dtype, causal value, arch and
    feature subset (canonical order)."""
    subsets = [f for n in range(len(space.FEATURES) + 1) for f in itertools.combinations(space.FEATURES, n)]
    return itertools.product(space.DIRECTIONS, space.HEAD_DIMS, space.DTYPES, (False, True), space.ARCHS, subsets)


def cpp_array(text: str, name: str) -> list[str]:
    """The elements of `static/inline constexpr ... name[] = {...};` as written."""
    match = re.search(rf"\b{name}\[\]\s*=\s*\{{([^}}]*)\}};", text)
    assert match, f"{name}[] not found"
    return [item.strip() for item in match.group(1).split(",") if item.strip()]


def cpp_constant(text: str, name: str) -> str:
    match = re.search(rf"\b{name}\s*=\s*([^;]+);", text)
    assert match, f"{name} not found"
    return match.group(1).strip()


def unquote(items: list[str]) -> list[str]:
    assert all(i.startswith('"') and i.endswith('"') for i in items), items
    return [i[1:-1] for i in items]


def test_the_checked_in_header_is_what_space_py_renders():
    assert SPACE_HEADER.read_text() == render.space_header_text(), (
        f"{SPACE_HEADER} differs from flashbuild/selection/space.py: run "
        f"`python3 -m flashbuild.pipeline.render --write-space-header` and commit it")


def test_the_header_holds_the_space_head_dims_feature_bits_and_names():
    text = SPACE_HEADER.read_text()
    assert [int(h) for h in cpp_array(text, "kKernelHeadDims")] == list(space.HEAD_DIMS)
    assert int(cpp_constant(text, "kMaxKernelHeadDim")) == max(space.HEAD_DIMS)
    assert unquote(cpp_array(text, "kFeatureNames")) == list(space.FEATURES)
    enum = dict(re.findall(r"^\s*(k\w+) = (\d+),$", re.search(r"enum Feature : int \{(.*?)\};", text, re.S).group(1),
                           re.M))
    assert {name: int(bit) for name, bit in enum.items()} == {
        "kNoFeatures": 0, **{"k" + f[0].upper() + f[1:]: bit for f, bit in space.FEATURE_BITS.items()}}
    # Feature i is bit 1 << i: the binding walks kFeatureNames by bit index.
    assert [space.FEATURE_BITS[f] for f in space.FEATURES] == [1 << i for i in range(len(space.FEATURES))]
    assert int(cpp_constant(text, "kAllFeatures")) == space.ALL_FEATURES_MASK
    assert unquote([cpp_constant(text, "kArchPrefix")]) == [space.ARCH_PREFIX]
    dtypes = re.search(r"enum class DType : int \{(.*?)\};", text, re.S).group(1)
    assert dict(re.findall(r"^\s*(k\w+) = (\d+),$", dtypes, re.M)) == {
        space.DTYPE_ENUMS[d].rsplit("::", 1)[1]: str(i) for i, d in enumerate(space.DTYPES)}
    assert unquote(cpp_array(text, "kDTypeNames")) == list(space.DTYPES)


def test_the_name_rule_round_trips_and_matches_variant_name():
    for direction, hdim, dtype, causal, arch, features in every_variant():
        variant = Variant(direction, hdim, dtype, causal, arch, features)
        assert variant.name == space.variant_name(direction, hdim, dtype, causal, arch, features)
        assert Variant.from_name(variant.name) == variant
        assert variant.features_mask == space.features_mask(features)
    for bad in ("fwd_hdim64_fp16_sm90_softcap_local", "fwd_hdim64_fp16_sm90_local_local", "fwd_hdim64_fp16_causal",
                "fwd_hdim64_fp32_sm90", "xyz_hdim64_fp16_sm90"):
        assert space.parse_name(bad) is None, bad


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found (the C++ name rule is compiled on the host)")
def test_the_cpp_name_rule_gives_the_python_names(tmp_path):
    """kernels/common/variant_space.h's variant_name, compiled on the host, names every variant as
    Variant.name does (the names are the compiled-in table's keys the binding looks up)."""
    def strings(values):
        return ", ".join(f'"{v}"' for v in values)
    masks = sorted({space.features_mask(f) for *_, f in every_variant()})
    source = tmp_path / "names.cpp"
    source.write_text(f"""#include <cstdio>
#include "common/variant_space.h"
int main() {{
  const char* directions[] = {{{strings(space.DIRECTIONS)}}};
  const int hdims[] = {{{", ".join(map(str, space.HEAD_DIMS))}}};
  const char* dtypes[] = {{{strings(space.DTYPES)}}};
  const int archs[] = {{{", ".join(str(space.ARCH_NUMBER[a]) for a in space.ARCHS)}}};
  const int masks[] = {{{", ".join(map(str, masks))}}};
  for (const char* d : directions) for (int h : hdims) for (const char* t : dtypes) for (bool c : {{false, true}})
    for (int a : archs) for (int m : masks) std::puts(flashbuild::variant_name(d, h, t, c, a, m).c_str());
}}
""")
    binary = tmp_path / "names"
    subprocess.run(["g++", "-std=c++17", "-O0", f"-I{KERNELS}", str(source), "-o", str(binary)], check=True,
                   capture_output=True, text=True)
    names = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.split()
    expected = [Variant(d, h, t, c, a, f) for d, h, t, c, a, f in every_variant()]
    expected.sort(key=lambda v: (space.DIRECTIONS.index(v.direction), v.hdim, space.DTYPES.index(v.dtype), v.causal,
                                 space.ARCHS.index(v.arch), v.features_mask))
    assert names == [v.name for v in expected]


def test_a_rendered_build_table_holds_the_names_axes_and_bits_the_space_derives():
    selection = select(hdim="32,128,256", dtype="fp16,bf16", arch="sm80,sm90", direction="fwd,bwd,splitkv",
                       causal="both", features=["local", "softcap"])
    texts = render.render_texts(selection, build_key="sm80+sm90-test-0123abcd")
    table = texts["flashbuild_table.h"]
    plain = [(d, h, t, c, a) for d, h, t, c, a in itertools.product(
        space.DIRECTIONS, (32, 128, 256), space.DTYPES, (False, True), ("sm80", "sm90"))]
    expected = sorted((space.variant_name(*p, f) for p in plain for f in ((), space.FEATURES)),
                      key=lambda name: Variant.from_name(name).sort_key())
    assert unquote(cpp_array(table, "kVariants")) == expected
    assert int(cpp_constant(table, "kNumVariants")) == len(expected)
    assert [int(h) for h in cpp_array(table, "kHeadDims")] == [32, 128, 256]
    assert [int(a) for a in cpp_array(table, "kArchs")] == [space.ARCH_NUMBER["sm80"], space.ARCH_NUMBER["sm90"]]
    assert unquote(cpp_array(table, "kDTypes")) == list(space.DTYPES)
    assert unquote(cpp_array(table, "kDirections")) == list(space.DIRECTIONS)
    assert unquote(cpp_array(table, "kFeatures")) == list(space.FEATURES)
    assert int(cpp_constant(table, "kFeaturesMask")) == space.features_mask(space.FEATURES)
    assert unquote([cpp_constant(table, "kFeatureSuffix")]) == [space.feature_suffix(space.FEATURES)]
    # Each variant's TU is named by the same rule (its kernel TUs add their part).
    tus = {name[:-3] for name in texts if name.endswith(".cu")}
    assert set(expected) <= tus
    assert all(any(tu == name or tu.startswith(name + "_kernel") for name in expected) for tu in tus), sorted(tus)


def test_the_builtin_profile_takes_its_axes_and_names_from_the_space():
    builtin = profiles.load(profiles.BUILTIN)
    assert (builtin.hdims, builtin.dtypes, builtin.directions, builtin.features) == \
           (space.HEAD_DIMS, space.DTYPES, space.DIRECTIONS, space.FEATURES)
    assert {d: i.name for d, i in builtin.instantiations.items()} == {d: space.NAME_RULE for d in space.DIRECTIONS}
    assert set(builtin.archs) == set(space.ARCHS)
    text = (profiles.profiles_dir() / "flashbuild.toml").read_text()
    # [tests] names the test suites' parameters (hdim = "head_dim"), not the axes: the search leaves it out
    text = re.sub(r"^\[tests(\.\w+)?\]\n(?:(?!\[).*\n?)*", "", text, flags=re.M)
    for spelled in (r"^hdim\s*=", r"^dtype\s*=", r"^direction\s*=", r"^names\s*=", r"^name\s*=\s*\"\w*\{"):
        assert not re.search(spelled, text, re.M), f"flashbuild.toml spells {spelled} itself"


def test_a_profile_on_the_space_that_spells_an_axis_is_refused(tmp_path):
    text = (profiles.profiles_dir() / "flashbuild.toml").read_text().replace("[axes]\n", "[axes]\nhdim = [64]\n")
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(SelectionError, match=r"axes.hdim: expected no such key: with space = \"flashbuild\""):
        profiles.read_profile(path)


def test_the_binding_and_kernel_headers_spell_no_name_head_dim_list_or_feature_bit():
    binding = BINDING.read_text()
    assert not re.search(r'"_hdim"|"_causal"|"_sm"|"--no-(local|softcap)"', binding), "the binding spells a name"
    assert not re.search(r"\b32, 64, 96\b|\b128, 192, 256\b", binding), "the binding spells the head dims"
    assert not re.search(r'"(fp16|bf16)"', binding), "the binding spells a dtype name"
    assert not re.search(r"kLocal \| kSoftcap|\{\s*\"local\", \"softcap\"\s*\}", binding), "the binding lists the features"
    # The directions it passes to resolve() are the space's.
    directions = set(re.findall(r'resolve\("(\w+)"', binding))
    assert directions and directions <= set(space.DIRECTIONS), directions
    assert not re.search(r"enum (Feature\s*:|class DType)", (KERNELS / "common" / "params.h").read_text())
    assert not re.search(r"head_dim == 32 \|\|", (KERNELS / "hopper" / "fwd_launch.h").read_text())


def test_kernel_entry_takes_the_family_from_the_family_table():
    """templates/kernel_entry.j2 picks a kernel's entry type by KernelTu.entry, never by the direction."""
    text = (REPO / "templates" / "kernel_entry.j2").read_text()
    assert "variant.direction" not in text and "variant.family" not in text
    from flashbuild.selection.families import FAMILIES
    entries = {k.entry for family in FAMILIES.values() for tus in family.kernel_tus.values() for k in tus}
    assert entries == set(re.findall(r'kernel\.entry == "(\w+)"', text))
