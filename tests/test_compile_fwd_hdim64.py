"""hdim 64's forward as measured in benchmarks/fwd_sass_fa3's calls h200-11 and h200-12 (kernels/hopper/fwd_mainloop.h):
kUniformQ, Q's wgmma descriptors from the warp-uniform warpgroup index, in its plain kernels (arm uq1: 1.005-1.016x in
turns), and kPeelTile, the causal kernel's masked steps in a loop of their own (arm peel on top of it: 1.000-1.011x);
both bit-identical. Real nvcc, no GPU: the default hdim-64 causal kernel is instruction for instruction the measured
arms' (both defines for a whole build), and neither spills nor uses the stack. It fails without either default."""

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
