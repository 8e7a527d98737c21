"""The Hopper backward's defaults as benchmarks/hopper_bwd_untimed's call measured them (kernels/hopper/bwd_traits.h,
bwd_tile): at hdim 96 each consumer warpgroup hands its half of dQ to the writer warp alone (arm halves, h200-1:
1.019-1.054x in turns, deterministic gradients bitwise equal). Real nvcc, no GPU: the default causal kernel is
instruction for instruction the arm's (its define for the whole build), and neither spills nor uses the stack. It
fails without the default."""

from __future__ import annotations

import pytest

from helpers import main_kernel_sass, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

HALVES = ["-DFLASHBUILD_HOPPER_BWD_DQ_HALVES=1"]  # benchmarks/hopper_bwd_untimed/ab.py's arm halves


def test_the_hdim96_backward_hands_on_dq_by_halves(tmp_path):
    default = main_kernel_sass(tmp_path / "default", "bwd", 96, True, [])
    assert default == main_kernel_sass(tmp_path / "halves", "bwd", 96, True, HALVES), "not the measured arm's (halves)"
