"""kMaxChains (kernels/hopper/fwd_mainloop.h, OnlineSoftmax in fwd_softmax.h): each row's max over a step's scores in 4
independent FMNMX chains in the plain causal forward of hdim 96 and 128 (benchmarks/fwd_sass_fa3, calls h200-6 to
h200-8: bit-identical, 1.005-1.032x in turns), one chain elsewhere. Real nvcc, no GPU, the default hdim-128 causal
kernel beside the same kernel built with one chain (-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=1): the default holds the chains'
combining FMNMX (more of them than one chain has), and neither spills, uses the stack or serializes its wgmmas (ptxas
C7514)."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

KERNEL = "fwd_hdim128_fp16_causal_sm90_kernel"


def build_causal_kernel(tmp_path, name: str, defines: list[str]):
    args = ["--hdim", "128", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", "on",
            "--no-local", "--no-softcap", "--jobs", "1", "--verbose", *(f"--nvcc-flag={d}" for d in defines)]
    obj, output = compile_kernel_object(tmp_path / name, args, KERNEL)
    assert "C7514" not in output, "ptxas serialized the wgmmas"
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(KERNEL, obj) if "fwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return inspection.sass_text(obj)


def test_the_causal_forward_takes_its_row_max_in_chains(tmp_path):
    chains = build_causal_kernel(tmp_path, "default", [])
    one = build_causal_kernel(tmp_path, "one", ["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=1"])
    assert chains.count("FMNMX") > one.count("FMNMX"), (chains.count("FMNMX"), one.count("FMNMX"))
    assert chains.count("MUFU.EX2") == one.count("MUFU.EX2"), "the same exponentials either way"
