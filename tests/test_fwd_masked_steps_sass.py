"""Real nvcc, no GPU: the causal Hopper forward at a 128-row tile walks its masked (diagonal) steps in a loop of
their own and the rest in a loop with no mask code (FwdMainloop::kPeelMasked, kernels/hopper/fwd_mainloop.h;
measured in benchmarks/fwd_causal_fa3). Each step body is a lambda with two call sites: a third would stop nvcc
inlining it, and the accumulators would go to the stack (benchmarks/fwd_masked_steps). So the kernel holds one
loop body's wgmmas more than the one-loop kernel (-DFLASHBUILD_HOPPER_FWD_PEEL=0), and neither has a stack frame
or local-memory traffic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import compile_kernel_object, plain_selection, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

VARIANT = "fwd_hdim128_fp16_causal_sm90_kernel"


def kernel_object(*defines: str) -> Path:
    """The shared build's object (helpers.shared_build; the default's is test_compile_fwd_max_chains.py's too)."""
    return compile_kernel_object(plain_selection("fwd", 128, "on", defines), VARIANT)[0]


def test_causal_hdim128_forward_peels_its_masked_steps_without_a_stack_frame():
    from flashbuild.debug import inspection

    peeled = kernel_object()
    one_loop = kernel_object("-DFLASHBUILD_HOPPER_FWD_PEEL=0")
    counts = {}
    for name, obj in (("peeled", peeled), ("one loop", one_loop)):
        (report,) = [r for r in inspection.inspect_object(VARIANT, obj) if "fwd_kernel" in r.kernel]
        assert report.stack_bytes == 0 and report.spill_store_bytes == 0 and report.spill_load_bytes == 0, (name, report)
        counts[name] = len(re.findall(r"\bHGMMA\.", inspection.sass_text(obj)))
    # A step issues Q K^T (head dim / 16 wgmmas of k 16) and P V (block_n / 16): 8 + 8 at the 128 x 128 tile.
    assert counts["peeled"] - counts["one loop"] == 16, counts
