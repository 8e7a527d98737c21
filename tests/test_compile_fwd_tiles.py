"""The Hopper forward's tile per variant (kernels/hopper/fwd_params.h, kVariantTile; the heuristic in fwd_traits.h,
fwd_tile): a host program compiled with nvcc against fwd_params.h prints every head dim's, causal flag's and feature
set's tile. Plain hdim-192 variants take 112-key tiles, ping-pong only causal (benchmarks/fwd_short_hdim256: measured
on those kernels alone), and every variant with a local window or softcap keeps its head dim's tile as it was
measured (fwd_tile with no `plain`), so a change of the plain tiles cannot reach the feature kernels unmeasured."""

from __future__ import annotations

import subprocess

import pytest

from flashbuild import env
from flashbuild.selection.space import FEATURES, HEAD_DIMS
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

PROGRAM = """\
#include <cstdio>
#include "hopper/fwd_params.h"

template <int kHeadDim, bool kIsCausal, int kFeatures>
void print_one() {
  constexpr flashbuild::hopper::FwdTile t = flashbuild::hopper::kVariantTile<kHeadDim, kIsCausal, kFeatures>;
  constexpr flashbuild::hopper::FwdTile d = flashbuild::hopper::fwd_tile(kHeadDim);
  std::printf("%d %d %d %d %d %d %d %d %d %d %d\\n", kHeadDim, int(kIsCausal), kFeatures, t.block_m, t.block_n,
              t.stages, int(t.pingpong), d.block_m, d.block_n, d.stages, int(d.pingpong));
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


def test_plain_hdim192_takes_112_keys_and_feature_variants_keep_their_tile(tmp_path):
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("no CUTLASS headers (pip install nvidia-cutlass)")
    source, binary = tmp_path / "tiles.cu", tmp_path / "tiles"
    source.write_text(PROGRAM.replace("HEAD_DIMS", ", ".join(map(str, HEAD_DIMS))))
    nvcc = env.find_nvcc()
    build = subprocess.run([nvcc.path, "-std=c++17", "--expt-relaxed-constexpr", f"-I{REPO / 'kernels'}",
                            f"-I{cutlass}", str(source), "-o", str(binary)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    lines = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    rows = [tuple(map(int, line.split())) for line in lines if line]
    assert len(rows) == len(HEAD_DIMS) * 2 * (1 << len(FEATURES))
    for hdim, causal, features, *tile_and_default in rows:
        tile, default = tuple(tile_and_default[:4]), tuple(tile_and_default[4:])
        where = (hdim, causal, features)
        assert tile[1] % 16 == 0 and tile[0] % 64 == 0, where
        if features:
            assert tile == default, where  # a feature kernel: its head dim's measured tile
        elif hdim == 192:
            assert tile == (128, 112, 2, causal), where
        elif hdim != 128 or causal:  # hdim 128's plain non-causal kernel takes the 176-key wide tile (kWideKeys)
            assert tile == default, where
    assert (192, 0, 1, 128, 96, 2, 1, 128, 96, 2, 1) in rows  # the local hdim-192 kernel as before
