"""K/V multicast (kernels/hopper/fwd_params.h, kMulticastKV; benchmarks/fwd_kv_multicast/): hdim 128's plain
non-causal 128-key kernel issues its K and V boxes as TMA multicasts and meets the other CTA of its cluster at cluster
barriers (its start and its end); the 176-key kernel, whose O leaves through V's ring (kOAliasesV, where multicast lost
on the H200), has none of it and is instruction for instruction the kernel built without multicast
(-DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0, the tree before); the 128-key kernel built so has none either. None
spills or uses the stack. Real nvcc, no GPU."""

from __future__ import annotations

import pytest

from helpers import compile_kernel_object, plain_selection, requires_nvcc, sass_instructions

pytestmark = [requires_nvcc, pytest.mark.compile]


def kernels(defines: list[str]) -> dict[str, str]:
    """The SASS of the 128-key and the 176-key kernel of one build."""
    from flashbuild.debug import inspection

    keys128, _ = compile_kernel_object(plain_selection("fwd", 128, "off", defines),
                                       "fwd_hdim128_fp16_sm90_kernel_keys128")
    out = {}
    for kind, obj in (("keys128", keys128), ("wide", keys128.parent / "fwd_hdim128_fp16_sm90_kernel.o")):
        (main,) = [r for r in inspection.inspect_object(obj.stem, obj) if "fwd_kernel" in r.kernel]
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, (kind, main)
        out[kind] = inspection.sass_text(obj)
    return out


def test_only_the_128_key_kernel_multicasts():
    default = kernels([])
    before = kernels(["-DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0"])
    assert "UTMALDG.4D.MULTICAST" in default["keys128"], "the 128-key kernel issues no multicast"
    assert "UCGABAR_ARV" in default["keys128"] and "UCGABAR_WAIT" in default["keys128"], "no cluster barrier"
    for name, sass in (("176-key", default["wide"]), ("128-key without multicast", before["keys128"])):
        assert "MULTICAST" not in sass and "UCGABAR" not in sass, f"the {name} kernel should not multicast"
    assert sass_instructions(default["wide"]) == sass_instructions(before["wide"]), "the 176-key kernel changed"
