"""kUniformQ (kernels/hopper/fwd_mainloop.h): Q's wgmma descriptors from the warp-uniform warpgroup index, on by
default in the plain forward kernels of hdim 128 and, since call h200-11 of benchmarks/fwd_sass_fa3 (arm uq1:
1.005-1.016x in turns, bit-identical), of hdim 64. Real nvcc, no GPU: the default hdim-64 causal kernel is instruction
for instruction the measured arm's (-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1 for a whole build), which holds no R2UR in
its main loop's steps, and neither spills nor uses the stack."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, requires_nvcc
from test_compile_fwd_max_chains import instructions

pytestmark = [requires_nvcc, pytest.mark.compile]

KERNEL = "fwd_hdim64_fp16_causal_sm90_kernel"
ARM = ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1"]  # benchmarks/fwd_sass_fa3/ab.py's uq1


def causal_kernel_sass(tmp_path, name: str, defines: list[str]) -> str:
    args = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", "on",
            "--no-local", "--no-softcap", "--jobs", "1", *(f"--nvcc-flag={d}" for d in defines)]
    obj, _ = compile_kernel_object(tmp_path / name, args, KERNEL)
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(KERNEL, obj) if "fwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return inspection.sass_text(obj)


def test_the_hdim64_forward_is_the_measured_uniform_q_arm(tmp_path):
    default = instructions(causal_kernel_sass(tmp_path, "default", []))
    arm = instructions(causal_kernel_sass(tmp_path, "uq1", ARM))
    assert default == arm, "the default hdim-64 causal kernel differs from the uq1 arm's"
