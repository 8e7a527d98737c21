"""Test helpers: a FLASHBUILD_ROOT holding a tiny synthetic kernel (compiles in seconds, so the
build pipeline can be tested end to end), the in-process CLI, the nvcc skip marker."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from flashbuild import env
from flashbuild.cli import cli

REPO = Path(__file__).resolve().parents[1]

# A stand-in for kernels/ampere/fwd_launch.h: the same run_fwd contract (the 5th template argument is
# the variant's features_mask), a trivial kernel.
FAKE_LAUNCH_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild {
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
__global__ void fake_fwd_kernel(FwdParams params) {
  if (threadIdx.x == 0) params.lse[0] = float(kArch * 1000 + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType) + 10 * kFeatures);
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  fake_fwd_kernel<kArch, kHeadDim, kDType, kIsCausal, kFeatures><<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""

# A stand-in for kernels/ampere/bwd_launch.h: the run_bwd contract of kernels/common/params.h. It
# includes a header of its own (FAKE_BWD_DETAIL), so an edit there concerns the bwd TUs alone.
FAKE_BWD_DETAIL = "ampere/bwd_detail.h"
FAKE_BWD_LAUNCH_H = """\
#pragma once
#include "common/params.h"
#include "ampere/bwd_detail.h"

namespace flashbuild {
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
__global__ void fake_bwd_kernel(BwdParams params) {
  if (threadIdx.x == 0) params.dq_accum[0] = bwd_detail_value(kArch * 1000 + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType) + 10 * kFeatures);
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  fake_bwd_kernel<kArch, kHeadDim, kDType, kIsCausal, kFeatures><<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""


# A stand-in for kernels/ampere/splitkv_launch.h: the run_splitkv contract.
FAKE_SPLITKV_LAUNCH_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild {
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
__global__ void fake_splitkv_kernel(FwdParams params) {
  if (threadIdx.x == 0) params.lse[0] = float(params.num_splits + kArch + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType) + 10 * kFeatures);
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  fake_splitkv_kernel<kArch, kHeadDim, kDType, kIsCausal, kFeatures><<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""


def make_root(base: Path, launch_header: str = FAKE_LAUNCH_H, bwd_launch_header: str = FAKE_BWD_LAUNCH_H) -> Path:
    """A FLASHBUILD_ROOT: the real templates, configs and kernels/common, and the given launch headers."""
    root = base / "root"
    for sub in ("templates", "configs", "kernels/common"):
        shutil.copytree(REPO / sub, root / sub)
    (root / "kernels" / "ampere").mkdir(parents=True)
    (root / "kernels" / "ampere" / "fwd_launch.h").write_text(launch_header)
    (root / "kernels" / "ampere" / "bwd_launch.h").write_text(bwd_launch_header)
    (root / "kernels" / "ampere" / "splitkv_launch.h").write_text(FAKE_SPLITKV_LAUNCH_H)
    (root / "kernels" / FAKE_BWD_DETAIL).write_text(
        "#pragma once\nnamespace flashbuild {\n__device__ inline float bwd_detail_value(int x) { return float(x); }\n}\n")
    return root


def run_cli(*args: str):
    """Invoke the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(cli, list(args))


requires_nvcc = pytest.mark.skipif(env.find_nvcc() is None,
                                   reason="nvcc not found (CUDA_HOME, PATH, /usr/local/cuda, nvidia-cuda-nvcc wheel)")
