"""The Hopper backward's kKeys step at head dims 64 and 128 (kernels/hopper/bwd_mainloop.h: kUniformWarpgroups,
kStatsInRegisters, kStatsShuffled; benchmarks/hopper_bwd_uniform/). What the A/B timed rests on the SASS, so this
holds it: between a kernel's first and last HGMMA (the consumers' loop) no R2UR (every wgmma descriptor is built
in uniform registers), and the step's LSE and dsum loads issued before the waits they used to follow: at hdim 128
eight LDS.64 of LSE before the wait for S^T and eight of dsum before the wait for dP^T, at hdim 64 four LDS of
each (FlashAttention-3's shuffled form: 4 rows a lane, 64 SHFL.IDX a step), and no spills in either kernel or its
ordered twin. Real nvcc, no GPU: fp16, non-causal, the main kernel and its ordered twin (deterministic mode)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def step_events(sass: str) -> list[str]:
    """The opcodes (with their operands) from the first HGMMA to the last: the consumers' loop."""
    ops = [f"{m.group(1)}{m.group(2)}" for m in OPCODE.finditer(sass)]
    first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    last = max(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    return ops[first:last + 1]


def loads_between_waits(ops: list[str]) -> tuple[int, int]:
    """LDS before the step's first wait for S^T (gsb0, 0x1), and between it and the first wait for all (0x0)."""
    wait_s = next(i for i, op in enumerate(ops) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x1", op))
    wait_all = next(i for i, op in enumerate(ops) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x0", op))
    count = lambda a, b: sum(op.startswith("LDS") for op in ops[a:b])  # noqa: E731
    return count(0, wait_s), count(wait_s, wait_all)


def test_the_kkeys_step_builds_its_descriptors_in_uniform_registers_and_loads_its_stats_early(tmp_path):
    cache = tmp_path / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", "64,128", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", "off",
            "--no-local", "--no-softcap", "--compile-only", "--jobs", "2"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True, env=environ,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    from flashbuild.debug import inspection

    for hdim in (64, 128):
        for part in ("kernel", "kernel_ordered"):
            name = f"bwd_hdim{hdim}_fp16_sm90_{part}"
            obj = build_dir / "obj" / f"{name}.o"
            (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
            assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
            ops = step_events(inspection.sass_text(obj))
            assert not [op for op in ops if op.startswith("R2UR")], name
            if part == "kernel":
                shuffles = sum(op.startswith("SHFL.IDX") for op in ops)
                if hdim == 128:
                    assert loads_between_waits(ops) == (8, 8), (name, loads_between_waits(ops))
                    assert all(op.startswith("LDS.64") for op in ops if op.startswith("LDS")), name
                    assert shuffles == 0, (name, shuffles)
                else:
                    assert loads_between_waits(ops) == (4, 4), (name, loads_between_waits(ops))
                    assert shuffles == 64, (name, shuffles)
