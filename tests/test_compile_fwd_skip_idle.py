"""kSkipIdleQK (kernels/hopper/fwd_mainloop.h, on by default in the plain hdim-64 causal forward, with kRowLimits; the
A/B of benchmarks/fwd_short_hdim64): a consumer warpgroup whose rows see no key of a causal tile's first walked block
issues no Q K^T there. The branch around a wgmma must not cost the kernel its registers or make ptxas serialize
the products: real nvcc, no GPU, the default hdim-64 causal forward (192-row tiles, three warpgroups), nothing on
the stack, no spills, every Q K^T and P V group still there, and no ptxas C7514 warning (the one that says wgmmas
were serialized). The same with the forms timed after it, each built by its define: kSkipIdleBlock (an idle
warpgroup's first block released unread, a branch before the loop; on by default since, so built here off) and
kEarlyQDone (off by default: sQ released in the last step, a branch around a barrier arrive inside it)."""

from __future__ import annotations

import re

import pytest

from helpers import compile_kernel_object, plain_selection, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

# wgmma groups (each ends in a gsb0 HGMMA): the first step's Q K^T, each loop's Q K^T and P V (two loops: the masked
# steps, peeled, then the rest: kPeelTile, on at hdim 64 since benchmarks/fwd_sass_fa3 call h200-12), the last P V:
# the default kernel's six (nvcc 13.0; four with one loop), none dropped or copied by the branch.
GROUPS = 6


@pytest.mark.parametrize("defines", [
    [],
    ["-DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK=0"],
    ["-DFLASHBUILD_HOPPER_FWD_EARLY_Q_DONE=1"],
], ids=["default", "no-skip-idle-block", "early-q-done"])
def test_skipping_idle_warpgroups_first_qk_compiles_without_spills_or_serialized_wgmma(defines):
    name = "fwd_hdim64_fp16_causal_sm90_kernel"
    obj, output = compile_kernel_object(plain_selection("fwd", 64, "on", defines), name)
    assert "C7514" not in output, "ptxas serialized the wgmmas"
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(name, obj) if "fwd_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    sass = inspection.sass_text(obj)
    assert len(re.findall(r"HGMMA[^;]*gsb0", sass)) == GROUPS, "the kernel's wgmma groups changed"
