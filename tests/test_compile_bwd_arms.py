"""The Hopper backward's defaults as benchmarks/hopper_bwd_untimed's calls measured them (kernels/hopper/bwd_traits.h,
bwd_tile): at hdim 96 each consumer warpgroup hands its half of dQ to the writer warp alone (arm halves, h200-1:
1.019-1.054x in turns), and at hdim 128 the producer issues a stage's Q / dO copies before its LSE / dsum loads (arm
tmaf, h200-3: 1.004-1.013x); deterministic gradients bitwise equal. Real nvcc, no GPU: each default causal kernel is
instruction for instruction its arm's (the define for the whole build), and neither spills nor uses the stack. Each
fails without its default."""

from __future__ import annotations

import pytest

from helpers import main_kernel_sass, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

HALVES = ["-DFLASHBUILD_HOPPER_BWD_DQ_HALVES=1"]  # benchmarks/hopper_bwd_untimed/ab.py's arm halves
TMA_FIRST = ["-DFLASHBUILD_HOPPER_BWD_TMA_FIRST=1"]  # its arm tmaf


DEFAULTS = "96,128"  # the default kernels from one build, test_compile_bwd_peel.py's


def test_the_hdim96_backward_hands_on_dq_by_halves():
    default = main_kernel_sass("bwd", 96, True, [], hdims=DEFAULTS)
    assert default == main_kernel_sass("bwd", 96, True, HALVES), "not the measured arm's (halves)"


def test_the_hdim128_backward_issues_its_copies_first():
    default = main_kernel_sass("bwd", 128, True, [], hdims=DEFAULTS)
    assert default == main_kernel_sass("bwd", 128, True, TMA_FIRST), "not the measured arm's (tmaf)"
