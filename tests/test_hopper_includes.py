"""The sm90 Hopper TUs reach no Ampere-path kernel (issue 17): a Hopper variant's TUs never reach
ampere/fwd_kernel.h or ampere/bwd_kernel.h (no Ampere-path fallback is compiled beside them: the binding
answers what the Hopper kernels cannot take), and a variant served on the Ampere path alone reaches no
hopper/ header, so an edit to one family's kernel recompiles only that family's TUs.
Checked statically (no nvcc): the closure of the rendered TUs' quoted #includes, resolved against kernels/
(the compile tests check the same through ninja's recorded depfiles)."""

from __future__ import annotations

import pytest

from flashbuild.pipeline import render
from flashbuild.selection.variants import select
from test_binding_includes import KERNELS, QUOTED_INCLUDE


def closure(text: str) -> set[str]:
    """Every kernels/-relative header reachable from a TU's text through quoted includes."""
    seen: set[str] = set()
    pending = QUOTED_INCLUDE.findall(text)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        assert (KERNELS / name).is_file(), f"{name} is not in kernels/"
        pending += QUOTED_INCLUDE.findall((KERNELS / name).read_text())
    return seen


def rendered(**selection) -> dict[str, set[str]]:
    texts = render.render_texts(select(**selection), build_key="k")
    return {name[:-3]: closure(text) for name, text in texts.items() if name.endswith(".cu")}


HOPPER_KERNEL = {"fwd": {"hopper/fwd_kernel.h", "hopper/fwd_mainloop.h", "hopper/fwd_epilogue.h"},
                 "bwd": {"hopper/bwd_kernel.h", "hopper/bwd_mainloop.h", "hopper/bwd_epilogue.h"}}


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_no_tu_of_a_hopper_variant_reaches_an_ampere_kernel(direction):
    tus = rendered(hdim=128, dtype="bf16", arch="sm90", direction=direction, causal="on", features=[])
    name = f"{direction}_hdim128_bf16_causal_sm90"
    parts = {"fwd": ["", "_kernel"], "bwd": ["", "_kernel", "_kernel_ordered"]}[direction]
    assert set(tus) == {name + part for part in parts}
    # the main kernel: in its device-only kernel TU (the backward's ordered twin in another)
    assert HOPPER_KERNEL[direction] <= tus[f"{name}_kernel"]
    for part in parts:
        assert not {"ampere/fwd_kernel.h", "ampere/bwd_kernel.h"} & tus[name + part], sorted(tus[name + part])


def test_a_hopper_tu_reaches_no_ampere_header():
    """What both families use (the launch helpers, the element types and fragment numerics, the dsum kernel a
    backward launches first) is in kernels/common/ (common/launch.h, common/numeric.h, common/bwd_dsum.h): an edit
    to an ampere/ header recompiles no Hopper TU."""
    tus = rendered(hdim=64, dtype="fp16", arch="sm90", direction="fwd,bwd", causal="off", features=[])
    ampere = {name: sorted(h for h in headers if h.startswith("ampere/")) for name, headers in tus.items()}
    assert set(ampere) == {"fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel", "bwd_hdim64_fp16_sm90",
                           "bwd_hdim64_fp16_sm90_kernel", "bwd_hdim64_fp16_sm90_kernel_ordered"}
    assert all(headers == [] for headers in ampere.values()), ampere
    assert "common/bwd_dsum.h" in tus["bwd_hdim64_fp16_sm90"] and "common/launch.h" in tus["fwd_hdim64_fp16_sm90"]


def test_a_variant_with_no_hopper_kernel_reaches_the_ampere_kernel_in_its_one_tu():
    """Head dim 32's backward (no Hopper tile); its forward has one, split like the others."""
    tus = rendered(hdim=32, dtype="fp16", arch="sm90", direction="fwd,bwd", causal="off", features=[])
    assert set(tus) == {"fwd_hdim32_fp16_sm90", "fwd_hdim32_fp16_sm90_kernel", "bwd_hdim32_fp16_sm90"}
    assert "ampere/bwd_kernel.h" in tus["bwd_hdim32_fp16_sm90"]
    assert not [h for h in tus["bwd_hdim32_fp16_sm90"] if h.startswith("hopper/")]  # nothing to parse there
    assert HOPPER_KERNEL["fwd"] <= tus["fwd_hdim32_fp16_sm90_kernel"]
    assert "ampere/fwd_kernel.h" not in tus["fwd_hdim32_fp16_sm90"] | tus["fwd_hdim32_fp16_sm90_kernel"]


def test_a_backward_feature_tu_is_the_hopper_kernels_with_features():
    """The Hopper backward takes windows and softcap: a feature TU is a Hopper launch with its kernel TUs, like a
    plain one, and reaches no Ampere-path backward kernel."""
    tus = rendered(hdim=64, dtype="fp16", arch="sm90", direction="fwd,bwd", causal="off", features=["local", "softcap"])
    name = "bwd_hdim64_fp16_sm90_local_softcap"
    assert "hopper/bwd_launch.h" in tus[name] and "ampere/bwd_kernel.h" not in tus[name]
    for part in ("_kernel", "_kernel_ordered"):
        assert HOPPER_KERNEL["bwd"] | {"common/features.h"} <= tus[name + part], sorted(tus[name + part])
    assert HOPPER_KERNEL["fwd"] <= tus["fwd_hdim64_fp16_sm90_local_softcap_kernel"]  # the Hopper forward takes both


def test_a_hopper_backward_launch_tu_reaches_no_main_kernel_code():
    """The same for the backward: its launch TUs reach neither the main loop, its epilogue nor the main kernel; the
    first of each head dim and dtype also compiles their small kernels, dsum and the dQ conversion (bwd_dq_accum.h:
    dq_accum's layout, which the conversion reads), and the other reaches neither."""
    tus = rendered(hdim="64,256", dtype="bf16", arch="sm90", direction="bwd", causal="both", features=[])
    launches = [name for name in tus if not name.endswith(("_kernel", "_kernel_ordered"))]
    assert len(launches) == 4
    main_kernel = {"hopper/bwd_kernel.h", "hopper/bwd_mainloop.h", "hopper/bwd_epilogue.h"}
    small_kernels = {"hopper/bwd_small_kernels.h", "hopper/bwd_dq_accum.h", "common/bwd_dsum.h"}
    for name in launches:
        assert "hopper/bwd_params.h" in tus[name] and not main_kernel & tus[name], (name, sorted(tus[name]))
        if "_causal" in name:
            assert not small_kernels & tus[name], (name, sorted(tus[name]))
        else:
            assert small_kernels <= tus[name], (name, sorted(tus[name]))
        for part in ("kernel", "kernel_ordered"):
            assert main_kernel <= tus[f"{name}_{part}"] and "hopper/bwd_launch.h" not in tus[f"{name}_{part}"]


def test_a_hopper_forward_launch_tu_reaches_no_kernel_code():
    """A Hopper forward variant's own TU is its launch, host code: it reaches the descriptors and parameters
    (hopper/fwd_params.h) and none of the kernel's code, so an edit to the kernel recompiles only the
    device-only kernel TUs (the compile tests check the same through ninja's depfiles)."""
    tus = rendered(hdim="64,256", dtype="fp16", arch="sm90", direction="fwd", causal="both")
    launches = [name for name in tus if not name.endswith("_kernel")]
    assert len(launches) == 8
    kernel_code = HOPPER_KERNEL["fwd"] | {"hopper/fwd_softmax.h", "common/features.h", "common/mask.h"}
    for name in launches:
        assert "hopper/fwd_params.h" in tus[name] and not kernel_code & tus[name], (name, sorted(tus[name]))
        assert kernel_code <= tus[f"{name}_kernel"] and "hopper/fwd_launch.h" not in tus[f"{name}_kernel"]


def test_a_splitkv_launch_tu_reaches_no_forward_kernel_code():
    """Split-KV's launch TU keeps the append and combine kernels and reaches its kernel's traits, not its code:
    the kernel compiles device-only in the kernel TU, so an edit to the kernel recompiles that alone. On sm80 the
    kernel is the Ampere path's forward in decode mode; on sm90 (head dims 32-128) the Hopper forward's, compiled
    for decoding (hopper/splitkv_launch.h), its steps around the kernel from common/ and no ampere/ header; at
    hdim 192/256 sm90 keeps the Ampere path's."""
    tus = rendered(hdim="128,256", dtype="fp16", arch="sm80,sm90", direction="splitkv", causal="on", features=[])
    assert set(tus) == {f"splitkv_hdim{hdim}_fp16_causal_{arch}{part}" for hdim in (128, 256) for arch in ("sm80", "sm90")
                        for part in ("", "_kernel")} | {"splitkv_hdim128_fp16_causal_sm90_kernel_decode"}
    hopper_code = HOPPER_KERNEL["fwd"] | {"hopper/fwd_softmax.h", "common/features.h", "common/mask.h"}
    for hdim, arch in ((128, "sm80"), (256, "sm80"), (256, "sm90")):
        name = f"splitkv_hdim{hdim}_fp16_causal_{arch}"
        assert {"ampere/fwd_entry.h", "ampere/fwd_traits.h", "common/append_kv.h"} <= tus[name], sorted(tus[name])
        assert "ampere/fwd_kernel.h" not in tus[name] and "ampere/fwd_softmax.h" not in tus[name], sorted(tus[name])
        assert "ampere/fwd_kernel.h" in tus[name + "_kernel"] and "ampere/splitkv_launch.h" not in tus[name + "_kernel"]
        assert not any(h.startswith("hopper/") for h in tus[name] | tus[name + "_kernel"]), (name, sorted(tus[name]))
    name = "splitkv_hdim128_fp16_causal_sm90"
    assert {"hopper/splitkv_launch.h", "hopper/fwd_params.h", "common/append_kv.h", "common/splitkv_combine.h"} <= \
        tus[name], sorted(tus[name])
    assert not hopper_code & tus[name] and "ampere/fwd_kernel.h" not in tus[name], sorted(tus[name])
    assert hopper_code <= tus[name + "_kernel"] and "hopper/splitkv_launch.h" not in tus[name + "_kernel"]
    assert "ampere/fwd_kernel.h" not in tus[name + "_kernel"]
    # The decode tile's kernel (head dims 64 and 128) compiles device-only too, on the split-KV kernel's code.
    assert hopper_code | {"hopper/splitkv_decode_kernel.h"} <= tus[name + "_kernel_decode"]
    assert "hopper/splitkv_launch.h" not in tus[name + "_kernel_decode"]
    # Its steps around the kernel (checks, index check, append, combine) are common/'s: no Ampere header at all.
    assert not any(h.startswith("ampere/") for h in tus[name] | tus[name + "_kernel"]), sorted(tus[name])

def test_a_hopper_direction_reaches_none_of_the_others_headers():
    """What both Hopper directions use is in the family's unprefixed headers (sm90.h, accumulator.h, utils.h,
    tile_scheduler.h, gmma_extra.h): a backward TU reaches no hopper/fwd_* header and a forward TU no hopper/bwd_*
    one, so an edit to the forward's tiles or softmax recompiles no backward TU, and the reverse."""
    tus = rendered(hdim="64,256", dtype="bf16", arch="sm90", direction="fwd,bwd", causal="both", features=[])
    for name, headers in tus.items():
        other = "hopper/fwd_" if name.startswith("bwd") else "hopper/bwd_"
        assert not [h for h in headers if h.startswith(other)], (name, sorted(headers))
