"""The Hopper forward's persistent deal walked on the host (benchmarks/fwd_tile_turnover/deal_check.cu, compiled
with nvcc against kernels/hopper/tile_scheduler.h, run on the CPU; no GPU): every (batch, head, query block) is
dealt exactly once over query blocks a head 1-160, 1-600 (batch, head)s, grids of 1-132 CTAs and every
FLASHBUILD_HOPPER_FWD_PAIRS setting, and without pairs the deal is the plain longest-first order, CTA by CTA.
A tile dealt twice is a race on O; one never dealt is unwritten output, so the GPU tests would see it only for
the shapes they run."""

from __future__ import annotations

import subprocess

import pytest

from flashbuild import env
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]


def test_every_tile_is_dealt_once_under_every_pairs_setting(tmp_path):
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("no CUTLASS headers (pip install nvidia-cutlass)")
    binary = tmp_path / "deal_check"
    nvcc = env.find_nvcc()
    build = subprocess.run([nvcc.path, "-std=c++17", "--expt-relaxed-constexpr", f"-I{REPO / 'kernels'}",
                            f"-I{cutlass}", "-x", "cu", str(REPO / "benchmarks/fwd_tile_turnover/deal_check.cu"),
                            "-o", str(binary)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert " 0 fail" in done.stdout, done.stdout[-3000:]
