"""Which Hopper forward variants take 176-key tiles is decided twice: in C++ (kernels/hopper/fwd_params.h, kWideKeys:
run_fwd_sm90 then launches a 128-key kernel for paged and short calls) and in Python (selection/families.py,
has_wide_keys: the variant then has a <variant>_kernel_keys128.cu TU that compiles that kernel). A C++ variant with
wide tiles and no such TU would be an undefined symbol at load; a TU no launch calls, a wasted compile. A host
program compiled with nvcc against fwd_params.h prints kWideKeys for every head dim, causal flag and feature set;
each must equal the Python rule, and the TU list must hold the keys128 TU exactly where the rule says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flashbuild import env
from flashbuild.selection.families import has_wide_keys
from flashbuild.selection.space import FEATURES, HEAD_DIMS
from flashbuild.selection.variants import Variant
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

PROGRAM = """\
#include <cstdio>
#include "hopper/fwd_params.h"

template <int kHeadDim, bool kIsCausal, int kFeatures>
void print_one() {
  std::printf("%d %d %d %d\\n", kHeadDim, int(kIsCausal), kFeatures,
              int(flashbuild::hopper::kWideKeys<kHeadDim, kIsCausal, kFeatures>));
}

template <int kHeadDim, bool kIsCausal, int... kFeatures>
void print_features(std::integer_sequence<int, kFeatures...>) { (print_one<kHeadDim, kIsCausal, kFeatures>(), ...); }

template <int... kHeadDims>
void print_all(std::integer_sequence<int, kHeadDims...>) {
  (print_features<kHeadDims, false>(std::make_integer_sequence<int, flashbuild::kAllFeatures + 1>{}), ...);
  (print_features<kHeadDims, true>(std::make_integer_sequence<int, flashbuild::kAllFeatures + 1>{}), ...);
}

int main() { print_all(std::integer_sequence<int, HEAD_DIMS>{}); }
"""


def test_the_python_rule_is_the_kernels(tmp_path):
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("no CUTLASS headers (pip install nvidia-cutlass)")
    source, binary = tmp_path / "wide_keys.cu", tmp_path / "wide_keys"
    source.write_text(PROGRAM.replace("HEAD_DIMS", ", ".join(map(str, HEAD_DIMS))))
    nvcc = env.find_nvcc()
    build = subprocess.run([nvcc.path, "-std=c++17", "--expt-relaxed-constexpr", f"-I{REPO / 'kernels'}",
                            f"-I{cutlass}", str(source), "-o", str(binary)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    lines = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    rows = [tuple(map(int, line.split())) for line in lines if line]
    assert len(rows) == len(HEAD_DIMS) * 2 * (1 << len(FEATURES))
    wide = []
    for hdim, causal, mask, cpp in rows:
        features = tuple(f for i, f in enumerate(FEATURES) if mask & (1 << i))
        variant = Variant("fwd", hdim, "fp16", bool(causal), "sm90", features)
        assert has_wide_keys(variant) == bool(cpp), (variant.name, cpp)
        assert ("kernel_keys128" in [k.part for k in variant.kernel_tus]) == bool(cpp), variant.name
        wide += [variant.name] if cpp else []
    assert wide == ["fwd_hdim128_fp16_sm90"]  # the rule holds somewhere: not a test of two empty sets


def test_the_wide_variants_launch_needs_both_kernels_and_each_tu_holds_one(tmp_path):
    """fwd_hdim128_fp16_sm90 compiled for real: its launch object needs the fatbins of both kernel TUs (the wide
    kernel's and the 128-key one's), each of which defines its own and holds one Hopper forward kernel, with 176 and
    128 keys (HGMMA.64x176x16 in the first alone), neither spilling."""
    import re

    from flashbuild.debug import inspection

    cache = tmp_path / "cache"
    environ = {**env_without_root(), "FLASHBUILD_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "flashbuild", "--hdim", "128", "--dtype", "fp16", "--arch", "sm90",
                           "--direction", "fwd", "--causal", "off", "--features", "none", "--compile-only",
                           "--jobs", "2"], capture_output=True, text=True, env=environ, cwd=REPO, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    variant, parts = "fwd_hdim128_fp16_sm90", ("kernel", "kernel_keys128")
    fatbins = {}
    for name in [variant] + [f"{variant}_{part}" for part in parts]:
        lines = subprocess.run(["nm", str(build_dir / "obj" / f"{name}.o")], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        fatbins[name] = {tuple(line.split()[-2:][::-1]) for line in lines if "flashbuild_fatbin_" in line}
    assert fatbins == {variant: {(f"flashbuild_fatbin_{variant}_{part}", "U") for part in parts},
                       **{f"{variant}_{part}": {(f"flashbuild_fatbin_{variant}_{part}", "R")} for part in parts}}
    for part, wide in zip(parts, (True, False)):
        obj = build_dir / "obj" / f"{variant}_{part}.o"
        sass = inspection.sass_text(obj)
        (kernel,) = re.findall(r"Function : (\S+)", sass)
        assert "hopper10fwd_kernel" in kernel and ("HGMMA.64x176x16" in sass) == wide, part
        (report,) = inspection.inspect_object(variant, obj)
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report


def env_without_root() -> dict[str, str]:
    import os

    environ = dict(os.environ)
    environ.pop("FLASHBUILD_ROOT", None)
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), environ.get("PYTHONPATH", "")])
    return environ
