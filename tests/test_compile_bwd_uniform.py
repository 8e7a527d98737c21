"""Where the Hopper backward's kKeys step gets each query row's LSE and dsum (kernels/hopper/bwd_mainloop.h,
kStatsForm; benchmarks/hopper_bwd_uniform/). What the A/B timed rests on the SASS, so this holds it, real nvcc, no
GPU:
- the plain non-causal hdim-64 kernel (and its ordered twin) loads 4 LSE and 4 dsum values a lane a step, each
  before the wait it used to follow (S^T's, dP^T's), takes the rest by 64 SHFL.IDX, and spills nothing; the causal
  one keeps its 16 + 16 LDS.64 after the waits (form 0 ran slower there);
- the study forms still compile to what was timed: hdim 128 with -DFLASHBUILD_HOPPER_BWD_UNIFORM_WG=1 and
  -DFLASHBUILD_HOPPER_BWD_STATS=1 has no R2UR in its step (every wgmma descriptor in uniform registers) and its
  8 + 8 LDS.64 before the waits, no spills."""

from __future__ import annotations

import re

import pytest

from helpers import plain_selection, requires_nvcc, shared_build

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def step_ops(sass: str) -> list[str]:
    """The opcodes (with their operands) from the kernel's first HGMMA to its last: the consumers' loop."""
    ops = [f"{m.group(1)}{m.group(2)}" for m in OPCODE.finditer(sass)]
    first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    last = max(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    return ops[first:last + 1]


def loads_around_waits(ops: list[str]) -> tuple[int, int]:
    """LDS before the step's first wait for S^T (gsb0, 0x1), and between it and its first wait for all (0x0)."""
    wait_s = next(i for i, op in enumerate(ops) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x1", op))
    wait_all = next(i for i, op in enumerate(ops) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x0", op))
    count = lambda a, b: sum(op.startswith("LDS") for op in ops[a:b])  # noqa: E731
    return count(0, wait_s), count(wait_s, wait_all)


def build(hdim, causal, *defines):
    """The shared build (helpers.shared_build); hdim 64's is test_compile_bwd_dkv_tma.py's too."""
    return shared_build(plain_selection("bwd", hdim, causal, defines))[0]


def main_kernel(build_dir, name):
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    return main, step_ops(inspection.sass_text(obj))


def test_the_hdim64_non_causal_step_shuffles_its_row_stats_and_the_causal_one_reads_shared_memory():
    build_dir = build(64, "both")
    for part in ("kernel", "kernel_ordered"):
        main, ops = main_kernel(build_dir, f"bwd_hdim64_fp16_sm90_{part}")
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert loads_around_waits(ops) == (4, 4), (part, loads_around_waits(ops))
        assert sum(op.startswith("SHFL.IDX") for op in ops) == 64, part
    _, ops = main_kernel(build_dir, "bwd_hdim64_fp16_causal_sm90_kernel")
    assert loads_around_waits(ops) == (0, 16), loads_around_waits(ops)
    assert all(op.startswith("LDS.64") for op in ops if op.startswith("LDS")) and "SHFL.IDX" not in " ".join(ops)


def test_the_study_forms_build_uniform_descriptors_and_registers_for_the_stats():
    build_dir = build(128, "off", "-DFLASHBUILD_HOPPER_BWD_UNIFORM_WG=1", "-DFLASHBUILD_HOPPER_BWD_STATS=1")
    main, ops = main_kernel(build_dir, "bwd_hdim128_fp16_sm90_kernel")
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
    assert not [op for op in ops if op.startswith("R2UR")]
    assert loads_around_waits(ops) == (8, 8), loads_around_waits(ops)
