"""`flashbuild inspect` without a GPU: cuobjdump's text parsed from samples, the occupancy estimate,
and the real forward kernel's objects (the session's shared compile) read end to end."""

from __future__ import annotations

import json

import pytest

from flashbuild import env
from flashbuild.debug import inspection
from helpers import run_cli

RES_USAGE = """
Fatbin elf code:
================
arch = sm_90a
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:11 CONSTANT[4]:88
 Function _ZN10flashbuild6ampere10fwd_kernelIiEEvNS_9FwdParamsE:
  REG:255 STACK:112 SHARED:1024 LOCAL:0 CONSTANT[0]:696 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

SASS = """
\tcode for sm_90a
\t\tFunction : _ZN10flashbuild6ampere10fwd_kernelIiEEvNS_9FwdParamsE
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
                                                                               /* 0x000ff00000000800 */
        /*0010*/                   HMMA.16816.F32 R4, R8, R12, R4 ;            /* 0x0000000c0804723c */
        /*0020*/              @!P0 HMMA.16816.F32 R16, R8, R14, R16 ;          /* 0x0000000e0810723c */
        /*0030*/                   FFMA.FTZ R0, R1, R2, R3 ;                   /* 0x0000000201007223 */
        /*0040*/                   LDSM.16.M88.4 R20, [R2] ;                   /* 0x000000000214783b */
        /*0050*/                   STL.64 [R1], R4 ;                           /* 0x0000000401007387 */
        /*0060*/                   STL [R1+0x8], R6 ;                          /* 0x0000080601007387 */
        /*0070*/               @P1 LDL.128 R8, [R1+0x10] ;                     /* 0x0000100001081983 */
        /*0080*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;  /* 0x00000000041879f0 */
        /*0090*/                   EXIT ;                                      /* 0x000000000000794d */
\t\t..........
"""

ELF = """
.nv.info
\t<0x1>
\tAttribute:\tEIATTR_REGCOUNT
.nv.info._ZN10flashbuild6ampere10fwd_kernelIiEEvNS_9FwdParamsE
\t<0x13>
\tAttribute:\tEIATTR_MAX_THREADS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x80 0x1 0x1 
\t<0x14>
\tAttribute:\tEIATTR_CRS_STACK_SIZE
.nv.callgraph
\tAttribute:\tEIATTR_MAX_THREADS
\tValue:\t0x400 0x1 0x1
"""

KERNEL = "_ZN10flashbuild6ampere10fwd_kernelIiEEvNS_9FwdParamsE"


def test_res_usage_gives_registers_stack_and_static_shared_memory():
    res = inspection.parse_res_usage(RES_USAGE)
    assert res == {KERNEL: {"arch": "sm_90a", "REG": 255, "STACK": 112, "SHARED": 1024, "LOCAL": 0,
                            "CONSTANT[0]": 696, "TEXTURE": 0, "SURFACE": 0, "SAMPLER": 0}}


def test_sass_gives_the_instruction_mix_with_predicates_dropped():
    sass = inspection.parse_sass(SASS)
    assert list(sass) == [KERNEL]
    assert sass[KERNEL][:3] == ["LDC", "HMMA.16816.F32", "HMMA.16816.F32"]
    mix = inspection.instruction_mix(sass[KERNEL])
    assert mix == {"HGMMA": 1, "HMMA": 2, "FFMA": 1, "LDSM": 1, "LDL": 1, "STL": 2, "total": 10}


def test_local_memory_bytes_count_each_ldl_stl_by_its_width():
    instructions = inspection.parse_sass(SASS)[KERNEL]
    assert inspection.local_bytes(instructions, "STL") == 8 + 4
    assert inspection.local_bytes(instructions, "LDL") == 16


def test_short_kernel_names():
    assert inspection.short_name("void flashbuild::ampere::fwd_kernel<flashbuild::ampere::FwdTraits<64, 128, 64, 4, "
                                 "cutlass::half_t>, true>(flashbuild::FwdParams)") == "fwd_kernel"
    assert inspection.short_name("_Z3fooi") == "_Z3fooi"


def test_max_threads_comes_from_the_kernels_own_info_section():
    assert inspection.parse_max_threads(ELF) == {KERNEL: 128}


@pytest.mark.parametrize("arch, regs, threads, smem, warps, limited_by", [
    ("sm_90a", 255, 128, 1024, 8, "registers"),      # 256 regs/thread: 8192 per warp -> 8 warps
    ("sm_80", 64, 256, 0, 32, "registers"),          # 2048 per warp: 32 warps, 4 blocks of 8
    ("sm_80", 128, 128, 0, 16, "registers"),
    ("sm_86", 32, 256, 0, 48, "warps"),
    ("sm_80", 32, 128, 100 * 1024, 4, "static shared memory"),
    ("sm_90a", 32, 32, 0, 32, "blocks"),
])
def test_occupancy_takes_the_tightest_limit(arch, regs, threads, smem, warps, limited_by):
    occ = inspection.occupancy(arch, regs, threads, smem)
    assert (occ.warps_per_sm, occ.limited_by) == (warps, limited_by)
    assert 0 < occ.percent <= 100


def test_report_flags_spills_and_local_memory():
    res = inspection.parse_res_usage(RES_USAGE)[KERNEL]
    report = inspection.report("fwd_hdim128_fp16_sm90", KERNEL, res, inspection.parse_sass(SASS)[KERNEL], 128)
    assert report.spill_store_bytes == 12 and report.spill_load_bytes == 16
    assert any("local-memory traffic: 12 B stored, 16 B loaded" in f for f in report.flags)
    assert any("112 B stack frame" in f for f in report.flags) and "registers at the 255 cap" in report.flags
    table = inspection.table([report])
    assert "fwd_hdim128_fp16_sm90" in table and "flags:" in table and "static" in table
    data = json.loads(inspection.reports_json([report]))["kernels"][0]
    assert data["registers"] == 255 and data["dynamic_smem_bytes"] is None and data["occupancy"]["percent"] == 12.5


# ---------------------------------------------------------------- the real forward kernel, no GPU

@pytest.fixture
def real_cache(real_fwd_build, monkeypatch, no_gpu):
    if real_fwd_build.process.returncode != 0:
        pytest.fail(f"the real forward kernel did not compile: {real_fwd_build.process.stderr[-2000:]}")
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(real_fwd_build.cache))
    monkeypatch.delenv("FLASHBUILD_ROOT", raising=False)
    # Whichever torch is installed, inspect sees a CPU build of it (the same version: the same key), so it
    # cannot link and reads the session's --compile-only objects as they are. With a CUDA torch it would
    # compile the binding and link first: a minute more on 2 cores, for nothing these tests read.
    installed = env.torch_info()
    if installed is not None:
        monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo(installed.version, None, installed.root))
    return real_fwd_build.cache


@pytest.mark.compile
def test_inspect_reads_the_real_forward_kernel_without_a_gpu(real_cache):
    result = run_cli("inspect", "--config", "ci-compile", "--json")
    assert result.exit_code == 0, result.output
    assert "nothing to compile: up to date" in result.stderr  # it reused the cached build
    data = json.loads(result.stdout)
    kernels = {k["variant"]: k for k in data["kernels"] if k["arch"] == "sm_80"}
    hopper = [k for k in data["kernels"] if k["variant"] == "fwd_hdim64_fp16_sm90_kernel"]
    # a row per TU's kernel; the sm90 variant's own TU (its launch, host code alone) has none
    assert sorted(k["variant"] for k in data["kernels"]) == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90_kernel"]
    for k in [*kernels.values(), *hopper]:
        assert 32 <= k["registers"] <= 255, k
        assert k["spill_store_bytes"] >= 0 and k["static_smem_bytes"] >= 0
        assert "fwd_kernel" in k["kernel"] and k["mix"]["total"] > 100
        assert 0 < k["occupancy"]["percent"] <= 100
    assert kernels["fwd_hdim64_fp16_sm80"]["mix"]["HMMA"] > 0 and kernels["fwd_hdim64_fp16_sm80"]["mix"]["HGMMA"] == 0
    # The sm90 variant's kernel TU holds the Hopper kernel (wgmma; at hdim 64 a producer and three consumer
    # warpgroups, 512 threads; no spills) alone, and no Ampere-path kernel (mma.sync) is built beside it.
    (wgmma,) = hopper
    assert wgmma["mix"]["HGMMA"] > 0 and wgmma["mix"]["HMMA"] == 0, wgmma
    assert wgmma["max_threads"] == 512 and wgmma["spill_store_bytes"] == 0 and wgmma["arch"] == "sm_90a"


@pytest.mark.compile
def test_inspect_table_and_sass_dump(real_cache, tmp_path):
    result = run_cli("inspect", "--config", "ci-compile", "--sass", "fwd_hdim64_fp16_sm90", "--sass-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[:4] == ["variant", "kernel", "arch", "regs"] and "HMMA" in lines[1]
    assert any(line.startswith("fwd_hdim64_fp16_sm80 ") and " fwd_kernel " in line for line in lines)
    sass = (tmp_path / "fwd_hdim64_fp16_sm90.sass").read_text()
    assert "code for sm_90a" in sass and "Function : " in sass and "HGMMA" in sass  # the Hopper kernel alone
    assert f"SASS of fwd_hdim64_fp16_sm90 (its kernel TU, fwd_hdim64_fp16_sm90_kernel): " \
           f"{tmp_path / 'fwd_hdim64_fp16_sm90.sass'}" in result.stdout


def test_sass_of_a_variant_not_in_the_selection_is_a_usage_error(cache):
    result = run_cli("inspect", "--config", "ci-compile", "--sass", "fwd_hdim128_fp16_sm90")
    assert result.exit_code == 2
    assert "--sass fwd_hdim128_fp16_sm90: not a variant of this selection" in result.stderr
    assert "fwd_hdim64_fp16_sm80, fwd_hdim64_fp16_sm90" in result.stderr and not cache.exists()


def test_a_missing_cuobjdump_names_the_wheel_before_compiling_anything(monkeypatch, cache):
    real = env.find_cuda_tool
    monkeypatch.setattr(env, "find_cuda_tool", lambda name: None if name == "cuobjdump" else real(name))
    result = run_cli("inspect", "--config", "ci-compile")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "inspect needs cuobjdump" in line and "pip install nvidia-cuda-cuobjdump" in line
    assert not cache.exists()
