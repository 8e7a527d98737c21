"""The rows-80 form of the Hopper backward (kernels/hopper/bwd_rows80.h; benchmarks/hopper_bwd_rows80/), real nvcc,
no GPU: with -DFLASHBUILD_HOPPER_BWD_ROWS80=1 the hdim-128 non-causal kernel (and its deterministic twin) is the
80 x 128 tile with dQ computed transposed, every product of its step an 80-wide one (S^T, dP^T: SS 64x80x16; dQ^T:
SS 64x80x16; dV, dK: RS 64x128x16 over 80 query rows, 5 K steps each), with no spill (the deterministic twin: at
most 8 bytes, what nvcc 13.0 gives it); the causal kernel of the same
build keeps its 64-row tile, and the whole build (its launch TU's 80-row dQ conversion too) compiles. And on the CPU (tests/host/bwd_rows80_accum.cu, nvcc for
the host): the dq_accum order the form's partial last block rests on, from CuTe's own partition of dQ^T."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from flashbuild import env
from helpers import REPO, requires_nvcc

pytestmark = [requires_nvcc, pytest.mark.compile]

HGMMA = re.compile(r"HGMMA\.64x(\d+)x16\.F32(?:\.BF16)?\s+(\S+), (\S+),")
ROWS = re.compile(r"BwdTraitsILi128ELi(\d+)ELi128E")  # the mangled BwdTraits<128, kBlockM, 128, ...>


def build(tmp_path, form=1, causal="both"):
    cache = tmp_path / "cache"
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    args = ["--hdim", "128", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", causal, "--no-local",
            "--no-softcap", f"--nvcc-flag=-DFLASHBUILD_HOPPER_BWD_ROWS80={form}", "--compile-only", "--jobs", "1"]
    result = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True, env=environ,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    return build_dir


def main_kernel(build_dir, name):
    from flashbuild.debug import inspection

    obj = build_dir / "obj" / f"{name}.o"
    (main,) = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
    return main, inspection.sass_text(obj)


def products(sass: str) -> dict[tuple[str, bool], int]:
    """HGMMA count by (N, A from registers)."""
    counts: dict[tuple[str, bool], int] = {}
    for n, _, a in HGMMA.findall(sass):
        key = (n, a.startswith("R"))
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_the_define_builds_the_80_row_non_causal_kernel_without_spills_and_leaves_causal_at_64(tmp_path):
    build_dir = build(tmp_path)
    # The default-mode kernel spills nothing; the deterministic twin (nvcc 13.0) keeps 8 bytes on the stack, one
    # STL.64 / LDL.64 pair a step (benchmarks/hopper_bwd_rows80/README.md): held there, not grown.
    for part, spill in (("kernel", 0), ("kernel_ordered", 8)):
        main, sass = main_kernel(build_dir, f"bwd_hdim128_fp16_sm90_{part}")
        assert set(ROWS.findall(main.kernel)) == {"80"}, main.kernel
        assert main.registers <= 168, main
        assert main.spill_store_bytes <= spill and main.spill_load_bytes <= spill, main
        # S^T and dP^T (8 K steps of the head dim each) and dQ^T (8 K steps of the keys): 64x80; dV and dK: 5 K
        # steps each of the 80 query rows, A (P^T, dS^T) from registers.
        assert products(sass) == {("80", False): 24, ("128", True): 10}, (part, products(sass))
    main, sass = main_kernel(build_dir, "bwd_hdim128_fp16_causal_sm90_kernel")
    assert set(ROWS.findall(main.kernel)) == {"64"}, main.kernel
    assert not [n for n, _ in products(sass) if n == "80"]


def test_the_per_warpgroup_hand_off_form_builds_the_same_products_without_spills(tmp_path):
    """=2: each warpgroup hands its half of dQ^T on alone (kDqHalves), the writer adding it by 2 KB per 8-row group;
    neither kernel spills (nvcc 13.0)."""
    build_dir = build(tmp_path, form=2, causal="off")
    for part, spill in (("kernel", 0), ("kernel_ordered", 0)):
        main, sass = main_kernel(build_dir, f"bwd_hdim128_fp16_sm90_{part}")
        assert set(ROWS.findall(main.kernel)) == {"80"}, main.kernel
        assert main.spill_store_bytes <= spill and main.spill_load_bytes <= spill, main
        assert products(sass) == {("80", False): 24, ("128", True): 10}, (part, products(sass))
        assert "UBLKRED" in sass


def test_the_dq_accum_order_keeps_every_block_inside_the_rows_the_binding_allocates(tmp_path):
    """Float4 g of every thread is query rows [8g, 8g + 8) (CuTe's partition of dQ^T), vec is a bijection, the halves'
    runs hold their warpgroup's float4s, and for seqlen_q 1-20000 every block's added bytes cover its rows and end
    inside dq_accum (dense: seqlen_q rounded up to 128 rows; packed: the sequence's 128 slack rows)."""
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("the CUTLASS headers (nvidia-cutlass wheel) are not installed")
    binary = tmp_path / "bwd_rows80_accum"
    compiled = subprocess.run([str(env.find_nvcc().path), "-std=c++17", "-O2", f"-I{REPO / 'kernels'}", f"-I{cutlass}",
                               str(REPO / "tests" / "host" / "bwd_rows80_accum.cu"), "-o", str(binary)],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "FAIL" not in done.stdout, done.stdout[-3000:]
    assert " 0 failures" in done.stdout and "checked " in done.stdout
