"""The staged dK/dV epilogue of the Hopper backward (kernels/hopper/bwd_epilogue.h, stage_dkv, kStagedDkv: on
from hdim 96; benchmarks/hopper_bwd_dkv_tma/), real nvcc, no GPU: in the default non-causal hdim-64/128 build every
main kernel of hdim 128 (the deterministic twin too) stores dK and dV by bulk copies (UBLKCP) out of shared memory,
with no global store (STG) left in it, its two staging barriers (named barrier 6, bwd_traits.h: 0xe after CUTLASS's 8
reserved ones), 168 registers and no spill, while hdim 64's kernels (where the staged form lost its A/B) still store
them from registers (STG.E, no UBLKCP): what the check tells apart. The whole build (launch TUs too) compiles."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def build(tmp_path, hdim, *flags, causal="off"):
    cache = tmp_path / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", hdim, "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", causal,
            "--no-local", "--no-softcap", *(f"--nvcc-flag={f}" for f in flags), "--compile-only", "--jobs", "1"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True, env=environ,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    return build_dir


def main_kernel(build_dir, name):
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    return main, [f"{m.group(1)}{m.group(2)}" for m in OPCODE.finditer(inspection.sass_text(obj))]


def test_hdim128_stores_dk_dv_by_bulk_copies_from_shared_memory_and_hdim64_from_registers(tmp_path):
    # The staged store is the epilogue's, the same code whatever the mask: the non-causal kernels and their
    # deterministic twins stand for the causal ones (half the compile time of the CI tier).
    build_dir = build(tmp_path, "64,128")
    for part in ("kernel", "kernel_ordered"):
        name = f"bwd_hdim128_fp16_sm90_{part}"
        main, ops = main_kernel(build_dir, name)
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert main.registers <= 168, main
        assert not [op for op in ops if op.startswith("STG")], (name, "a global store is left")
        assert sum(op.startswith("UBLKCP") for op in ops) >= 1, name
        staged = [op for op in ops if op.startswith("BAR.SYNC") and re.search(r"\s0xe\b", op)]
        assert len(staged) == 2, (name, staged)
    main, ops = main_kernel(build_dir, "bwd_hdim64_fp16_sm90_kernel")
    assert sum(op.startswith("STG.E ") for op in ops) == 32, main  # dK + dV: 16 + 16 column pairs a thread
    assert not [op for op in ops if op.startswith("UBLKCP")]
