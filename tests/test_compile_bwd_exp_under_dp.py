"""The exponentials under dP^T's product, a study form of the Hopper backward (kernels/hopper/bwd_mainloop.h,
kExpUnderDp; benchmarks/hopper_bwd_exp_under_dp/), real nvcc, no GPU. What its A/B would time rests on the SASS, so
this holds it: at hdim 128 (plain kernel and its deterministic twin) -DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=1 issues all
32 MUFU.EX2 of a step between the wait for S^T and the wait for dP^T (the default: 1), =3 half of them (FA3: 13-14);
168 registers, no spill, no serialised wgmma (C7514)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);", re.M)


def exps_under_dp(sass: str) -> int:
    """MUFU.EX2 between the kernel's first wait for S^T (gsb0, 0x1: the step's) and the first wait for all after it."""
    ops = [f"{m.group(1)}{m.group(2)}" for m in OPCODE.finditer(sass)]
    wait_s = next(i for i, op in enumerate(ops) if re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x1", op))
    wait_all = next(i for i, op in enumerate(ops) if i > wait_s and re.match(r"WARPGROUP\.DEPBAR\.LE\s+gsb0, 0x0", op))
    return sum(op.startswith("MUFU.EX2") for op in ops[wait_s:wait_all])


@pytest.mark.parametrize("form, under", [(1, 32), (3, 16)])
def test_the_form_issues_the_exponentials_before_the_wait_for_dp(tmp_path, form, under):
    from flashbuild.debug import inspection

    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache")}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", "128", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", "off",
            "--no-local", "--no-softcap", "--compile-only", "--jobs", "2",
            f"--nvcc-flag=-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP={form}"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", "build", *args], capture_output=True, text=True,
                            env=environ, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "C7514" not in result.stdout + result.stderr, "ptxas serialised a wgmma"
    (build_dir,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    for part in ("kernel", "kernel_ordered"):
        name = f"bwd_hdim128_fp16_sm90_{part}"
        obj = build_dir / "obj" / f"{name}.o"
        (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
        assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0, main
        assert main.registers <= 168, main
        assert exps_under_dp(inspection.sass_text(obj)) == under, name
