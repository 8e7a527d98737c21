"""hdim 256's dQ (kernels/hopper/bwd_traits.h, kDqInTurn; bwd_epilogue.h, kDqHybrid), real nvcc, no GPU: the default
hdim-256 build compiles (launch TU and its dQ conversion too). Its deterministic twin hands both halves of each block's
dQ to the writer warp (benchmarks/hopper_bwd_hdim256_dq/): bulk reductions (UBLKRED), no atomic into dq_accum (no float
REDG). Its main kernel hands warpgroup 0's half to the writer and adds warpgroup 1's from registers
(benchmarks/hopper_bwd_dq_hybrid/): both the bulk reductions and the 16 REDG.E.ADD.F32x4 of one warpgroup's 64 x 128
floats, 16 STS.128 into sdQ. Both: 168 registers, no spill, and ptxas warned of no serialised wgmma (C7514); and the
step loads its rows' LSE and dsum into registers (BwdMainloop::kStatsHeadDimRegisters) before it issues S^T's first
product: 8 LDS.64 between its wait for the Q stage and that HGMMA, none after (kStatsEarly 2, that study's h200-7).
The same defaults elsewhere, as that study's h200-6 timed them: hdim 96's non-causal kernel adds warpgroup 1's half
from registers (its deterministic twin does not), and hdim 192's plain kernels load LSE and dsum into registers, after
the products are issued and before the waits (4 LDS.64 before the wait for S^T, 4 between it and the wait for all)."""

from __future__ import annotations

import re

import pytest

from helpers import plain_selection, requires_nvcc, shared_build

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def lse_and_dsum_loads(ops: list[str]) -> tuple[int, int]:
    """In the consumers' loop (first HGMMA to last): LDS before its first wait for S^T (gsb0, 0x1), and between that
    and its first wait for every product (0x0)."""
    first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    step = ops[first:max(i for i, op in enumerate(ops) if op.startswith("HGMMA")) + 1]
    wait_s = next(i for i, op in enumerate(step) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x1", op))
    wait_all = next(i for i, op in enumerate(step) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x0", op))
    return (sum(op.startswith("LDS") for op in step[:wait_s]),
            sum(op.startswith("LDS") for op in step[wait_s:wait_all]))


def loads_before_the_products(ops: list[str]) -> int:
    """LDS between the step's last mbarrier wait (its Q stage) and its first HGMMA."""
    first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    wait = max(i for i, op in enumerate(ops[:first]) if op.startswith("SYNCS.PHASECHK"))
    return sum(op.startswith("LDS") for op in ops[wait:first])


def main_kernel(build_dir, name):
    """The object's main backward kernel (its report) and its SASS opcodes with their operands."""
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    return main, [m.group(1) + m.group(2) for m in OPCODE.finditer(inspection.sass_text(obj))]


def test_hdim256_hands_dq_to_the_writer_warp_and_warpgroup_1_adds_its_half_without_spills():
    build_dir, output = shared_build(plain_selection("bwd", 256, "off"))
    assert "C7514" not in output, "ptxas serialised a wgmma"
    float_atomics = {}
    for part in ("kernel", "kernel_ordered"):
        name = f"bwd_hdim256_fp16_sm90_{part}"
        main, ops = main_kernel(build_dir, name)
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert main.registers <= 168, main
        assert sum(op.startswith("UBLKRED") for op in ops) >= 1, name  # the writer's bulk reductions
        assert loads_before_the_products(ops) == 8 and lse_and_dsum_loads(ops) == (0, 0), (
            name, loads_before_the_products(ops), lse_and_dsum_loads(ops))
        assert sum(op.split()[0] == "STS.128" for op in ops) == 16, name  # a consumer's half into sdQ
        # The deterministic twin keeps one REDG.E.ADD.S32 (the writer's turn counter, release_turn): no float ones.
        float_atomics[part] = [op.split()[0] for op in ops if op.startswith("REDG") and "F32" in op]
    assert float_atomics["kernel_ordered"] == [], "an atomic into dq_accum in deterministic mode"
    assert float_atomics["kernel"] == ["REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU"] * 16, float_atomics["kernel"]


def test_hdim96_non_causal_adds_one_half_of_dq_from_registers_and_hdim192_loads_its_row_stats_before_the_waits():
    build_dir, _ = shared_build(plain_selection("bwd", "96,192", "off"))
    for hdim, atomics in ((96, {"kernel": 6, "kernel_ordered": 0}), (192, {"kernel": 0, "kernel_ordered": 0})):
        for part, count in atomics.items():
            name = f"bwd_hdim{hdim}_fp16_sm90_{part}"
            main, ops = main_kernel(build_dir, name)
            assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.registers <= 168, main
            # hdim 96: warpgroup 1's 24 floats a thread as REDG.E.ADD.F32x4 (kDqHybrid), none in deterministic mode
            assert sum(op.startswith("REDG") and "F32" in op for op in ops) == count, name
            if hdim == 192:
                assert lse_and_dsum_loads(ops) == (4, 4), (name, lse_and_dsum_loads(ops))
