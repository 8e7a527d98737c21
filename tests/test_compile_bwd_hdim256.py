"""The Hopper backward's kHeadDim step in its kSdPWhole form (kernels/hopper/bwd_head_dim_whole.h;
benchmarks/hopper_bwd_hdim256/). What the A/B timed rests on the SASS, so this holds it, real nvcc, no GPU:
- -DFLASHBUILD_HOPPER_BWD_SDP_WHOLE=2 (and =1) at hdim 256: S^T and dP^T as one 64x64 product a warpgroup (16
  HGMMA.64x64x16 k-steps, no 64x32), P^T read back by ldmatrix (4 LDSM), 32 exponentials a thread, no spills, in
  the kernel and its deterministic twin;
- =0 keeps the split form: the 64x32 products of half the query rows each, 16 exponentials, no ldmatrix."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", re.M)


def build(tmp_path, *args):
    cache = tmp_path / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    common = ["--hdim", "256", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--no-local", "--no-softcap",
              "--compile-only", "--jobs", "2"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args, *common], capture_output=True, text=True,
                            env=environ, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    return build_dir


def main_kernel(build_dir, name):
    """The object's main kernel's report and its opcodes, counted."""
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    ops: dict[str, int] = {}
    for m in OPCODE.finditer(inspection.sass_text(obj)):
        ops[m.group(1)] = ops.get(m.group(1), 0) + 1
    return main, ops


@pytest.mark.parametrize("form", ["1", "2"])
def test_the_whole_form_issues_one_64x64_product_a_warpgroup_and_spills_nothing(tmp_path, form):
    build_dir = build(tmp_path, "--causal", "on", f"--nvcc-flag=-DFLASHBUILD_HOPPER_BWD_SDP_WHOLE={form}")
    for part in ("kernel", "kernel_ordered"):
        main, ops = main_kernel(build_dir, f"bwd_hdim256_fp16_causal_sm90_{part}")
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert ops.get("HGMMA.64x64x16.F32", 0) == 16 and not ops.get("HGMMA.64x32x16.F32"), (part, ops)
        assert ops.get("LDSM.16.M88.4") == 4 and ops.get("MUFU.EX2") == 32, (part, ops)


def test_the_split_form_is_kept_under_zero(tmp_path):
    build_dir = build(tmp_path, "--causal", "off", "--nvcc-flag=-DFLASHBUILD_HOPPER_BWD_SDP_WHOLE=0")
    main, ops = main_kernel(build_dir, "bwd_hdim256_fp16_sm90_kernel")
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
    assert ops.get("HGMMA.64x32x16.F32", 0) == 32 and not ops.get("HGMMA.64x64x16.F32"), ops
    assert not ops.get("LDSM.16.M88.4") and ops.get("MUFU.EX2") == 16, ops
