"""The Hopper forward's defaults as benchmarks/fwd_sass_fa3's calls measured them (kernels/hopper/fwd_mainloop.h):
kUniformQ, Q's wgmma descriptors from the warp-uniform warpgroup index (arm uq1), in the plain kernels of hdim 64
(h200-11: 1.005-1.016x in turns), hdim 96 causal and hdim 192 non-causal (h200-14: 1.011-1.026x, 1.005-1.012x); and
kPeelTile at hdim 64, the causal kernel's masked steps in a loop of their own (h200-12, arm peel on top of uq1:
1.000-1.011x); both at hdim 32, which takes hdim 64's tile (h200-15, arm uqp: 1.001-1.031x), with its rows' max in
2 chains (causal) or 4 (h200-16: 1.006-1.044x); all bit-identical.
Real nvcc, no GPU: each default kernel is instruction for instruction the measured arm's (the arm's defines for a
whole build), and neither spills nor uses the stack. Each fails without its default."""

from __future__ import annotations

import pytest

from helpers import main_kernel_sass, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

UQ1 = ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1"]  # benchmarks/fwd_sass_fa3/ab.py's arm uq1
PEEL = ["-DFLASHBUILD_HOPPER_FWD_PEEL=1"]  # its arm peel


def kernel_sass(hdim: int, causal: bool, defines: list[str]) -> list[str]:
    """The main kernel of the plain fp16 forward of hdim (causal or not), built with defines: its instructions."""
    return main_kernel_sass("fwd", hdim, causal, defines)


def test_the_hdim64_forward_is_the_measured_arms():
    """h200-11 timed uq1, then h200-12 peel on top of it."""
    default = kernel_sass(64, True, [])
    assert default == kernel_sass(64, True, UQ1 + PEEL), "not the measured arms' (uq1, peel)"


@pytest.mark.parametrize("hdim, causal", [(96, True), (192, False)])
def test_the_hdim96_causal_and_hdim192_plain_kernels_take_uniform_q(hdim, causal):
    """kUniformQ where call h200-14 measured it faster (hdim 96 causal, hdim 192 non-causal)."""
    default = kernel_sass(hdim, causal, [])
    assert default == kernel_sass(hdim, causal, UQ1), "not the uq1 arm's"


@pytest.mark.parametrize("causal", [True, False])
def test_the_hdim32_forward_is_the_measured_arms(causal):
    """h200-15 timed uqp (uq1 and peel together) at hdim 32, causal or not; h200-16 on top of it each row's max in 2
    chains (arm max2, the causal kernel's) and in 4 (max4, the non-causal one's)."""
    chains = [f"-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS={2 if causal else 4}"]
    default = kernel_sass(32, causal, [])
    assert default == kernel_sass(32, causal, UQ1 + PEEL + chains), "not the measured arms'"
