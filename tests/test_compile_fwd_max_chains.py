"""kMaxChains (kernels/hopper/fwd_mainloop.h, OnlineSoftmax in fwd_softmax.h): each row's max over a step's scores in 4
independent FMNMX chains in the plain causal forward of hdim 96 and 128 (benchmarks/fwd_sass_fa3, calls h200-6 to
h200-8: bit-identical, 1.005-1.032x in turns) and, with its softmax after its own P V, in hdim 128's 128-key non-causal
kernel (FwdMainloop::kKeys128Plain: calls h200-9 and h200-10, 1.003-1.016x), one chain elsewhere. Real nvcc, no GPU:
the default hdim-128 causal kernel beside the same kernel built with one chain (-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=1):
the default holds the chains' combining FMNMX (more of them than one chain has), and neither spills, uses the stack or
serializes its wgmmas (ptxas C7514); the default non-causal 128-key kernel is instruction for instruction the measured
arm's (nov4: no overlap, 4 chains, for a whole build), and its 176-key kernel is not (it keeps the overlap)."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, plain_selection, requires_nvcc, sass_instructions

pytestmark = [requires_nvcc, pytest.mark.compile]

KERNEL = "fwd_hdim128_fp16_causal_sm90_kernel"
NOV4 = ["-DFLASHBUILD_HOPPER_FWD_OVERLAP=0", "-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=4"]  # benchmarks/fwd_sass_fa3/ab.py's


def build_causal_kernel(defines: list[str]):
    obj, output = compile_kernel_object(plain_selection("fwd", 128, "on", defines), KERNEL)
    assert "C7514" not in output, "ptxas serialized the wgmmas"
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(KERNEL, obj) if "fwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return inspection.sass_text(obj)


def test_the_causal_forward_takes_its_row_max_in_chains():
    chains = build_causal_kernel([])
    one = build_causal_kernel(["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=1"])
    assert chains.count("FMNMX") > one.count("FMNMX"), (chains.count("FMNMX"), one.count("FMNMX"))
    assert chains.count("MUFU.EX2") == one.count("MUFU.EX2"), "the same exponentials either way"


def test_the_non_causal_128_key_kernel_is_the_measured_arm():
    from flashbuild.debug import inspection

    def objects(defines):
        keys128, _ = compile_kernel_object(plain_selection("fwd", 128, "off", defines),
                                           "fwd_hdim128_fp16_sm90_kernel_keys128")
        wide = keys128.parent / "fwd_hdim128_fp16_sm90_kernel.o"
        return sass_instructions(inspection.sass_text(keys128)), sass_instructions(inspection.sass_text(wide))

    default_128, default_176 = objects([])
    arm_128, arm_176 = objects(NOV4)
    assert default_128 == arm_128, "the default 128-key kernel differs from the nov4 arm's"
    assert default_176 != arm_176, "the 176-key kernel should keep the overlapped softmax and one chain"
