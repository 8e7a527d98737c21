"""compile_profile: `nvcc --time` CSV -> phase seconds -> table (no nvcc needed: the sample below is
what nvcc 13.0 wrote for a one-kernel TU, sm_90a, on the 2-core machine)."""

from __future__ import annotations

import pytest

from flashbuild.build import compile_profile

SAMPLE = """\
source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
t.cu , gcc (preprocessing 4) , t.cu  , /tmp/x-5_t.cpp4.ii ,  , nvcc , 115.6420 , ms
t.cu , cudafe++ , /tmp/x-5_t.cpp4.ii  , /tmp/x-6_t.cudafe1.cpp , compute_90a , nvcc , 434.0480 , ms
t.cu , gcc (preprocessing 1) , t.cu  , /tmp/x-7_t.cpp1.ii , compute_90a , nvcc , 89.9520 , ms
t.cu , cicc ,  /tmp/x-7_t.cpp1.ii  , /tmp/x-6_t.ptx , compute_90a , nvcc , 372.0000 , ms
t.cu , ptxas , /tmp/x-6_t.ptx  , /tmp/x-8_t.cubin , sm_90a , nvcc , 69.9870 , ms
t.cu , fatbinary , /tmp/x-8_t.cubin  , /tmp/x-3_t.fatbin ,  , nvcc , 5.9480 , ms
t.cu , gcc (compiling) ,   , t.o , compute_90a , nvcc , 256.3110 , ms
 , nvcc (driver) ,  , t.o ,  , nvcc , 0.6940 , ms
"""


def test_phases_are_folded_and_summed():
    phases = compile_profile.parse_nvcc_time(SAMPLE)
    assert phases["preprocessing"] == pytest.approx(0.2056, abs=1e-4)  # both gcc preprocessing passes
    assert phases["cicc"] == pytest.approx(0.372)
    assert phases["host compiler"] == pytest.approx(0.256311)
    assert phases["other"] == pytest.approx(0.000694)  # nvcc's own driver time
    assert sum(phases.values()) == pytest.approx(1.344, abs=1e-3)


def test_a_file_that_is_not_nvcc_time_output_is_refused():
    with pytest.raises(ValueError, match="not an `nvcc --time` CSV"):
        compile_profile.parse_nvcc_time("hello\n")


def test_the_table_has_a_row_per_tu_and_a_total(tmp_path):
    (tmp_path / "a.csv").write_text(SAMPLE)
    profiles = compile_profile.read_profiles({"fwd_a": tmp_path / "a.csv", "skipped": tmp_path / "none.csv"})
    table = compile_profile.format_table(profiles).splitlines()
    assert [line.split()[0] for line in table] == ["TU", "fwd_a", "total"]
    assert "cicc" in table[0] and table[1].split()[3] == "0.4s"


def test_rows_appended_by_several_tus_are_split_by_source():
    second = "\n".join(line.replace("t.cu ,", "dir/u.cu ,", 1) for line in SAMPLE.splitlines()[1:])
    profiles = compile_profile.parse_by_source(SAMPLE + SAMPLE.splitlines()[0] + "\n" + second + "\n")
    assert sorted(profiles) == ["t", "u"]
    assert profiles["u"]["cicc"] == pytest.approx(0.372) and profiles["t"]["other"] == 0.0


def test_build_profile_compile_prints_the_phase_table_in_its_own_build_dir(tmp_path, fake_root):
    """With the fake nvcc (tests/helpers.py), end to end: the table lists every compiled TU, and the
    profiled build's key differs from the plain build's (a plain build's commands never change)."""
    import os
    import subprocess
    import sys

    from helpers import make_fake_cuda

    environ = {**os.environ, "CUDA_HOME": str(make_fake_cuda(tmp_path)), "FLASHBUILD_ROOT": str(fake_root),
               "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "flashbuild", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction",
            "fwd", "--no-local", "--no-softcap", "--compile-only", "--jobs", "1"]
    profiled = subprocess.run([*args, "--profile-compile"], env=environ, capture_output=True, text=True, timeout=120)
    assert profiled.returncode == 0, profiled.stderr
    table = profiled.stderr.split("nvcc phases per TU (nvcc --time):\n", 1)[1].splitlines()
    assert [line.split()[0] for line in table[1:5]] == ["fwd_hdim64_fp16_causal_sm90", "fwd_hdim64_fp16_causal_sm90_fallback",
                                                         "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_fallback"]
    assert table[-1].split()[3] == "8.0s"  # cicc: 2 s per TU from the fake nvcc
    plain = subprocess.run(args, env=environ, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "nvcc phases" not in plain.stderr
    assert len(list((tmp_path / "cache").iterdir())) == 2  # two keys, two build dirs
