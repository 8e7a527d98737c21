"""compile_profile: `nvcc --time` CSV -> phase seconds -> table (no nvcc needed: the sample below is
what nvcc 13.0 wrote for a one-kernel TU, sm_90a, on the 2-core machine)."""

from __future__ import annotations

import pytest

from flashbuild.pipeline import compile_profile

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
    table = profiled.stderr.split("nvcc phases per TU (nvcc --time):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # the two launch TUs (the fake nvcc times `-c` compiles alone, not the kernel TUs' -fatbin ones)
    assert [line.split()[0] for line in table[1:]] == ["fwd_hdim64_fp16_causal_sm90", "fwd_hdim64_fp16_sm90", "total"]
    assert table[-1].split()[3] == "4.0s"  # cicc: 2 s per TU from the fake nvcc
    assert "cicc split" not in profiled.stderr  # tracing doubles a compile: never part of the phase table
    plain = subprocess.run(args, env=environ, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "nvcc phases" not in plain.stderr
    assert len(list((tmp_path / "cache").iterdir())) == 2  # two keys, two build dirs
    traced = subprocess.run([*args, "--profile-templates"], env=environ, capture_output=True, text=True, timeout=120)
    assert traced.returncode == 0, traced.stderr
    assert "nvcc phases per TU" not in traced.stderr
    split = traced.stderr.split("read it for proportions):\n", 1)[1].splitlines()
    assert split[0].split()[1:4] == ["headers", "templates", "front"]
    assert split[1].split()[:3] == ["fwd_hdim64_fp16_causal_sm90", "0.0s", "1.0s"]  # the fake trace: 1 s in cute::get
    # the launch TUs' traces (the fake nvcc writes none for the kernel TUs' -fatbin compiles: named as left out)
    assert [line for line in split if "left out" in line] == [
        f"{name}_kernel: left out (no trace written)" for name in ("fwd_hdim64_fp16_causal_sm90", "fwd_hdim64_fp16_sm90")]
    assert [line for line in split if "cute::get" in line and "1.00s" in line], split
    assert not list((tmp_path / "cache").glob("*/obj/*.o.json"))  # each trace deleted once read (GBs each)
    assert len(list((tmp_path / "cache").iterdir())) == 3


def _event(name, ts, dur, detail=None, tid=0):
    event = {"ph": "X", "pid": 8, "tid": tid, "ts": ts, "dur": dur, "name": name}
    if detail:
        event["args"] = {"detail": detail}
    return event


def test_cicc_is_split_by_the_innermost_header_or_template_event_around_each_self_time():
    """Front end 10 s: a header 4 s whose parsing instantiates cute::get 3 s (so the header's own
    parsing is 1 s), then cute::copy 2 s of which cute::get 0.5 s; 4 s of other front-end work. NVVM IR
    0.5 s and NVVM 3 s come from their own events; another thread's events are not the front end's."""
    trace = {"traceEvents": [
        _event("CUDA C++ Front-End", 0, 10_000_000),
        _event("Processing Header File", 1_000_000, 4_000_000, "cute/tensor.hpp"),
        _event("Instantiating Template Function", 1_500_000, 3_000_000, "cute::get [cute::get<0>(...)]"),
        _event("Instantiating Template Function", 6_000_000, 2_000_000, "cute::copy [cute::copy<...>]"),
        _event("Instantiating Template Function", 6_500_000, 500_000, "cute::get [cute::get<1>(...)]"),
        _event("Instantiating Template Function", 2_000_000, 9_000_000, "elsewhere", tid=1),
        _event("Generating NVVM IR", 10_000_000, 500_000),
        _event("LibNVVM", 10_500_000, 3_000_000),
        {"ph": "M", "name": "process_name"},
    ]}
    parts, families = compile_profile.parse_device_trace(trace)
    assert parts == pytest.approx({"headers": 1.0, "templates": 5.0, "front end other": 4.0, "NVVM IR": 0.5, "NVVM": 3.0})
    assert families == [("cute::get", pytest.approx(3.5), 2), ("cute::copy", pytest.approx(1.5), 1)]


def test_a_trace_without_the_front_end_is_refused_and_left_out_of_the_table(tmp_path):
    with pytest.raises(ValueError, match="no 'CUDA C\\+\\+ Front-End' event"):
        compile_profile.parse_device_trace({"traceEvents": [_event("LibNVVM", 0, 1)]})
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    traces, unreadable = compile_profile.read_traces({"bad": tmp_path / "bad.json", "empty": tmp_path / "empty.json",
                                                      "missing": tmp_path / "none.json"})
    assert traces == {} and sorted(unreadable) == ["bad", "empty", "missing"]
    assert unreadable["missing"] == "no trace written" and "CUDA C++ Front-End" in unreadable["empty"]
    table = compile_profile.format_cicc_table(traces, unreadable)
    assert "missing: left out (no trace written)" in table and "bad: left out" in table


@pytest.mark.parametrize("version, ok", [("13.0.88", True), ("12.8.61", True), ("12.6.85", False), ("unknown", False)])
def test_templates_need_an_nvcc_that_traces(version, ok):
    problem = compile_profile.trace_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert version in problem and "12.8" in problem and "--profile-compile" in problem


def test_profile_templates_with_an_old_nvcc_is_a_clear_error(tmp_path, fake_root):
    import os
    import subprocess
    import sys

    from helpers import make_fake_cuda

    home = make_fake_cuda(tmp_path)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(nvcc.read_text().replace("release 13.0, V13.0.88", "release 12.4, V12.4.131"))
    environ = {**os.environ, "CUDA_HOME": str(home), "FLASHBUILD_ROOT": str(fake_root),
               "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "flashbuild", "build", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90",
                          "--compile-only", "--profile-templates"], env=environ, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "needs nvcc >= 12.8" in run.stderr and "12.4.131" in run.stderr


@pytest.mark.parametrize("flag", ["--fdevice-time-trace=-", "--fdevice-time-trace -"])
def test_the_trace_flag_by_hand_is_refused_with_the_two_ways_that_work(flag):
    from click.testing import CliRunner

    from flashbuild.cli import cli

    result = CliRunner().invoke(cli, ["build", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run",
                                      f"--nvcc-flag={flag}"])
    assert result.exit_code == 2, result.output
    assert "--profile-templates" in result.output and "--fdevice-time-trace=FILE.json" in result.output
