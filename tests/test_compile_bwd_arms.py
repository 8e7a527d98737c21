"""The Hopper backward's defaults as benchmarks/hopper_bwd_untimed's call measured them (kernels/hopper/bwd_traits.h,
bwd_tile): at hdim 96 each consumer warpgroup hands its half of dQ to the writer warp alone (arm halves, h200-1:
1.019-1.054x in turns, deterministic gradients bitwise equal). Real nvcc, no GPU: the default causal kernel is
instruction for instruction the arm's (its define for the whole build), and neither spills nor uses the stack. It
fails without the default."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, requires_nvcc, sass_instructions

pytestmark = [requires_nvcc, pytest.mark.compile]

HALVES = ["-DFLASHBUILD_HOPPER_BWD_DQ_HALVES=1"]  # benchmarks/hopper_bwd_untimed/ab.py's arm halves


def kernel_sass(tmp_path, build: str, hdim: int, defines: list[str]) -> list[str]:
    """The main kernel of the causal fp16 backward of hdim, built with defines: its instructions."""
    name = f"bwd_hdim{hdim}_fp16_causal_sm90_kernel"
    args = ["--hdim", str(hdim), "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", "on",
            "--no-local", "--no-softcap", "--jobs", "1", *(f"--nvcc-flag={d}" for d in defines)]
    obj, _ = compile_kernel_object(tmp_path / build, args, name)
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return sass_instructions(inspection.sass_text(obj))


def test_the_hdim96_backward_hands_on_dq_by_halves(tmp_path):
    default = kernel_sass(tmp_path, "default", 96, [])
    assert default == kernel_sass(tmp_path, "halves", 96, HALVES), "not the measured arm's (halves)"
