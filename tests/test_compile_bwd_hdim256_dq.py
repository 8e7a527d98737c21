"""hdim 256's dQ through the writer warp, the default since benchmarks/hopper_bwd_hdim256_dq/ (kernels/hopper/
bwd_traits.h, kDqInTurn; nvcc -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=0 keeps the consumers' atomics), real nvcc, no GPU:
the default hdim-256 build compiles (launch TU and its dQ conversion too), and its main kernel and deterministic twin
hold no atomic into dq_accum (no float REDG: the atomics' form has 16 REDG.E.ADD.F32x4), the writer warp's bulk
reductions (UBLKRED), 168 registers and no spill, and ptxas warned of no serialised wgmma (C7514)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def test_hdim256_default_hands_dq_to_the_writer_warp_without_spills(tmp_path):
    from flashbuild.debug import inspection

    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache")}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", "256", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", "off",
            "--no-local", "--no-softcap", "--compile-only",
            "--jobs", "1"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", "build", *args], capture_output=True, text=True,
                            env=environ, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "C7514" not in result.stdout + result.stderr, "ptxas serialised a wgmma"
    (build_dir,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    for part in ("kernel", "kernel_ordered"):
        name = f"bwd_hdim256_fp16_sm90_{part}"
        obj = build_dir / "obj" / f"{name}.o"
        (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert main.registers <= 168, main
        ops = [m.group(1) for m in OPCODE.finditer(inspection.sass_text(obj))]
        # The deterministic twin keeps one REDG.E.ADD.S32 (the writer's turn counter, release_turn): no float ones.
        assert not [op for op in ops if op.startswith("REDG") and "F32" in op], (name, "an atomic into dq_accum is left")
        assert sum(op.startswith("UBLKRED") for op in ops) >= 2, name  # each half's bulk reduction
