"""The causal Hopper backward walks its masked query blocks in a loop of their own, then the rest with no mask
code, at head dim 96 only (kernels/hopper/bwd_mainloop.h, kPeelMasked; benchmarks/hopper_bwd_peel/: faster there,
and at 64 and 128 the two loops spill and ran slower). The gain rests on the SASS: the step compiled twice (each
copy issues its five products, each group ending in a `gsb0` HGMMA) with nothing on the stack; at 128 the one loop
(five groups) with no spills. Real nvcc, no GPU: hdim 96 and 128, fp16, causal, the main kernel and its ordered
twin (deterministic mode)."""

from __future__ import annotations

import re

import pytest

from helpers import plain_selection, requires_nvcc, shared_build

pytestmark = [requires_nvcc, pytest.mark.compile]

GROUPS_PER_STEP = 5  # S^T, dP^T, dV, dK and dQ: one wgmma group each (mma_keys)


def test_the_causal_hdim96_backward_peels_its_masked_steps_without_spilling():
    build_dir, _ = shared_build(plain_selection("bwd", "96,128", "on"))  # test_compile_bwd_arms.py's defaults too
    from flashbuild.debug import inspection

    copies = {}
    for hdim in (96, 128):
        for part in ("kernel", "kernel_ordered"):
            name = f"bwd_hdim{hdim}_fp16_causal_sm90_{part}"
            obj = build_dir / "obj" / f"{name}.o"
            (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
            assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
            groups = len(re.findall(r"HGMMA[^;]*gsb0", inspection.sass_text(obj)))
            assert groups % GROUPS_PER_STEP == 0, (name, groups)
            copies[name] = groups // GROUPS_PER_STEP
    expected = {96: 2, 128: 1}
    assert copies == {f"bwd_hdim{h}_fp16_causal_sm90_{part}": n for h, n in expected.items()
                      for part in ("kernel", "kernel_ordered")}, copies
