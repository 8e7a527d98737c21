"""The staged dK/dV epilogue of the Hopper backward (kernels/hopper/bwd_epilogue.h, stage_dkv: kStagedDkv, and
kDkvVector, its 16-byte copy-out; benchmarks/hopper_bwd_dkv_tma/, benchmarks/bwd_timeline/), real nvcc, no GPU: in
the default non-causal hdim-64/128 build every main kernel of hdim 128 (the deterministic twin too) stages dK and dV
in shared memory between its two staging barriers (named barrier 6, bwd_traits.h: 0xe after CUTLASS's 8 reserved
ones) and stores them as 16-byte global stores only (STG.E.128: 2 x 128 rows x 256 bytes over 256 threads, 16 a
thread; no bulk copy, no narrower store), with 168 registers and no spill; hdim 64's non-causal kernel likewise (8 a
thread). hdim 64's causal kernel copies out in a rolled loop (kDkvVectorRolled: unrolled, ptxas scheduled that
kernel's step otherwise and it ran slower, benchmarks/hopper_bwd_bench_turns/): one 16-byte store in the SASS, the
same two barriers. The whole build (launch TUs too) compiles."""

from __future__ import annotations

import re

import pytest

from helpers import BWD_MEASURED_SPILLS, plain_selection, requires_nvcc, shared_build

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def build(hdim, causal):
    """The shared build (helpers.shared_build): hdim 64's, causal or not, is test_compile_bwd_uniform.py's."""
    return shared_build(plain_selection("bwd", hdim, causal))[0]


def main_kernel(build_dir, name):
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    return main, [f"{m.group(1)}{m.group(2)}" for m in OPCODE.finditer(inspection.sass_text(obj))]


def check_staged_16_byte_stores(build_dir, name, per_thread):
    """name's main kernel: no spill (but BWD_MEASURED_SPILLS'), at most 168 registers, per_thread 16-byte global stores and no other, no bulk
    copy, dK / dV staged between the two staging barriers."""
    main, ops = main_kernel(build_dir, name)
    stored, loaded = BWD_MEASURED_SPILLS.get(name, (0, 0))
    assert main.spill_store_bytes <= stored and main.spill_load_bytes <= loaded, main
    assert main.registers <= 168, main
    stores = [op for op in ops if op.startswith("STG")]
    assert stores and all(op.split()[0].endswith(".128") for op in stores), (name, sorted(set(stores)))
    assert len(stores) == per_thread, (name, len(stores))
    assert not [op for op in ops if op.startswith("UBLKCP")], (name, "a bulk copy is left")
    staged = [op for op in ops if op.startswith("BAR.SYNC") and re.search(r"\s0xe\b", op)]
    assert len(staged) == 2, (name, staged)


def test_hdim64_and_128_store_dk_dv_staged_as_16_byte_stores():
    # The staged store is the epilogue's, the same code whatever the mask: the non-causal kernels and their
    # deterministic twins stand for hdim 128's causal ones (half the compile time of the CI tier).
    for name, per_thread in (("bwd_hdim128_fp16_sm90_kernel", 16), ("bwd_hdim128_fp16_sm90_kernel_ordered", 16)):
        check_staged_16_byte_stores(build(128, "off"), name, per_thread)
    check_staged_16_byte_stores(build(64, "both"), "bwd_hdim64_fp16_sm90_kernel", 8)


def test_hdim64_causal_copies_out_in_a_rolled_loop():
    # Rolled: one store in the SASS (unrolled, 8).
    for name in ("bwd_hdim64_fp16_causal_sm90_kernel", "bwd_hdim64_fp16_causal_sm90_kernel_ordered"):
        check_staged_16_byte_stores(build(64, "both"), name, 1)
