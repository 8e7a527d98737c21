"""The Hopper forward's defaults as benchmarks/fwd_sass_fa3's calls measured them (kernels/hopper/fwd_mainloop.h):
kUniformQ, Q's wgmma descriptors from the warp-uniform warpgroup index (arm uq1), in the plain kernels of hdim 64
(h200-11: 1.005-1.016x in turns), hdim 96 causal and hdim 192 non-causal (h200-14: 1.011-1.026x, 1.005-1.012x); and
kPeelTile at hdim 64, the causal kernel's masked steps in a loop of their own (h200-12, arm peel on top of uq1:
1.000-1.011x); all bit-identical. Real nvcc, no GPU: each default kernel is instruction for instruction the measured
arm's (the arm's defines for a whole build), and the hdim-64 one neither spills nor uses the stack. Each fails
without its default."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, requires_nvcc
from test_compile_fwd_max_chains import instructions

pytestmark = [requires_nvcc, pytest.mark.compile]

KERNEL = "fwd_hdim64_fp16_causal_sm90_kernel"
ARM = ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1", "-DFLASHBUILD_HOPPER_FWD_PEEL=1"]  # ab.py's uq1, then peel on it


def causal_kernel_sass(tmp_path, name: str, defines: list[str]) -> str:
    args = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", "on",
            "--no-local", "--no-softcap", "--jobs", "1", *(f"--nvcc-flag={d}" for d in defines)]
    obj, _ = compile_kernel_object(tmp_path / name, args, KERNEL)
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(KERNEL, obj) if "fwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return inspection.sass_text(obj)


def test_the_hdim64_forward_is_the_measured_arms(tmp_path):
    default = instructions(causal_kernel_sass(tmp_path, "default", []))
    arm = instructions(causal_kernel_sass(tmp_path, "uq1-peel", ARM))
    assert default == arm, "the default hdim-64 causal kernel differs from the measured arms' (uq1, peel)"


@pytest.mark.parametrize("hdim, causal", [(96, "on"), (192, "off")])
def test_the_hdim96_causal_and_hdim192_plain_kernels_take_uniform_q(tmp_path, hdim, causal):
    """kUniformQ where call h200-14 measured it faster (hdim 96 causal, hdim 192 non-causal): the default kernel is
    the uq1 arm's, instruction for instruction."""
    from flashbuild.debug import inspection

    name = f"fwd_hdim{hdim}_fp16{'_causal' if causal == 'on' else ''}_sm90_kernel"

    def sass(build, defines):
        args = ["--hdim", str(hdim), "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", causal,
                "--no-local", "--no-softcap", "--jobs", "1", *(f"--nvcc-flag={d}" for d in defines)]
        obj, _ = compile_kernel_object(tmp_path / build, args, name)
        return instructions(inspection.sass_text(obj))

    assert sass("default", []) == sass("uq1", ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1"]), f"{name} is not the uq1 arm's"
