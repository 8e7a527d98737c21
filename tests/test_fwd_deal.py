"""The Hopper forward's persistent deal walked on the host (benchmarks/fwd_tile_turnover/deal_check.cu, compiled
with nvcc against kernels/hopper/tile_scheduler.h, run on the CPU; no GPU): every (batch, head, query block) is
dealt exactly once over query blocks a head 1-160, 1-600 (batch, head)s, grids of 1-132 CTAs and every
FLASHBUILD_HOPPER_FWD_PAIRS setting, and without pairs the deal is the plain longest-first order, CTA by CTA.
A tile dealt twice is a race on O; one never dealt is unwritten output, so the GPU tests would see it only for
the shapes they run."""

from __future__ import annotations

import pytest

from helpers import REPO, requires_nvcc, run_host_program

pytestmark = [requires_nvcc, pytest.mark.compile]


def test_every_tile_is_dealt_once_under_every_pairs_setting(tmp_path):
    done = run_host_program(tmp_path, REPO / "benchmarks/fwd_tile_turnover/deal_check.cu")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert " 0 fail" in done.stdout, done.stdout[-3000:]
