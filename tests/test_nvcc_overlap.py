"""nvcc_overlap: nvcc's own steps with the host and device front ends at once. The object must be nvcc's
(same symbols but the module id, the device names the host registers), errors reported once, and
anything else it does not know run as plain nvcc."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.pipeline import graph, nvcc_overlap, toolchain
from helpers import requires_nvcc

DRIVER = Path(nvcc_overlap.__file__)
KERNELS = """\
#include "k.h"
namespace { __global__ void anon(float* x) { x[threadIdx.x] += SCALE; } }
static __global__ void stat(float* x) { x[0] *= 2.f; }
template <int N> __global__ void tmpl(float* x) { x[N] = N; }
void launch(float* x) { anon<<<1, 32>>>(x); stat<<<1, 1>>>(x); tmpl<3><<<1, 1>>>(x); }
"""
GENCODE = ["-gencode", "arch=compute_90a,code=sm_90a"]


def _compile(tmp: Path, name: str, *extra: str, driver: bool = True, source: str = "k.cu"):
    command = ["nvcc", "-Xcompiler", "-fPIC", "-O3", *GENCODE, "--no-compress", *extra, "-MD", "-MF",
               f"{name}.d", "-c", source, "-o", f"{name}.o"]
    if driver:
        command = [sys.executable, str(DRIVER), *command]  # as ninja runs it: the script alone, no package
    return subprocess.run(command, cwd=tmp, capture_output=True, text=True)


def _symbols(obj: Path) -> list[str]:
    names = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.split("\n")
    # the module id names the anonymous namespace (and the static initialiser the intermediate file)
    # (and with it the mangled lengths around it)
    return sorted(re.sub(r"\d+", "#", re.sub(r"_GLOBAL__N__\w+?_k_cu(_[0-9a-f]+)?(?=\d)", "<module>", line.split()[-1]))
                  for line in names if line.strip() and "_GLOBAL__sub_I_" not in line)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "k.h").write_text("#define SCALE 1.f\n")
    (tmp_path / "k.cu").write_text(KERNELS)
    return tmp_path


@requires_nvcc
@pytest.mark.compile
def test_the_object_is_nvccs_with_its_own_module_id_and_the_depfile_names_the_header(tree):
    plain, overlapped = _compile(tree, "plain", driver=False), _compile(tree, "both")
    assert plain.returncode == 0 and overlapped.returncode == 0, overlapped.stdout + overlapped.stderr
    assert _symbols(tree / "both.o") == _symbols(tree / "plain.o")
    binary = (tree / "both.o").read_bytes()
    # the device code (the uncompressed cubin) names the anonymous kernel as the host stub registers it
    (host_name,) = {m for m in re.findall(rb"_ZN\d+_GLOBAL__N__\w+?4anonEPf", binary)}
    assert binary.count(b".text." + host_name) >= 1
    depfile = (tree / "both.d").read_text()
    assert depfile.startswith("both.o") and "k.h" in depfile
    assert not list(Path("/tmp").glob("flashbuild-nvcc-both.o-*"))  # its steps' dir is gone


@requires_nvcc
@pytest.mark.compile
def test_a_compile_error_is_reported_once_with_nvccs_exit_status(tree):
    (tree / "bad.cu").write_text("__global__ void k(float* x) { x[0] = undefined_name; }\n")
    plain = _compile(tree, "p", source="bad.cu", driver=False)
    result = _compile(tree, "b", source="bad.cu")
    assert plain.returncode != 0 and result.returncode == plain.returncode
    output = result.stdout + result.stderr
    assert output.count('"undefined_name" is undefined') == 1, output  # one front end's, not both
    assert not (tree / "b.o").exists()


@requires_nvcc
@pytest.mark.compile
def test_flags_that_time_nvccs_own_steps_run_plain_nvcc(tree):
    result = _compile(tree, "timed", "--time", "phases.csv")
    assert result.returncode == 0, result.stderr
    phases = (tree / "phases.csv").read_text()
    assert "cudafe++" in phases and "cicc" in phases and (tree / "timed.o").is_file()


def test_a_plan_it_does_not_know_is_none_so_nvcc_runs_plain():
    env = "#$ _NVVM_BRANCH_=nvvm\n#$ CICC_PATH=/cuda/nvvm/bin\n"
    cudafe = ('#$ cudafe++ --gen_module_id_file --module_id_file_name "/k/x.module_id" --gen_c_file_name '
              '"/k/x.cudafe1.cpp" "/k/x.cpp4.ii"\n')
    host_pp = '#$ gcc -E -x c++ "x.cu" -o "/k/x.cpp4.ii"\n'
    device = ('#$ gcc -D__CUDA_ARCH__=900 -E -x c++ "x.cu" -o "/k/x.cpp1.ii"\n'
              '#$ "$CICC_PATH/cicc" --module_id_file_name "/k/x.module_id" "/k/x.cpp1.ii" -o "/k/x.ptx"\n'
              '#$ ptxas "/k/x.ptx" -o "/k/x.cubin"\n#$ fatbinary --embedded-fatbin="/k/x.fatbin.c"\n')
    last = '#$ gcc -c -x c++ "/k/x.cudafe1.cpp" -o "x.o"\n'
    plan = nvcc_overlap.parse_dryrun(env + host_pp + cudafe + device + last, "/k")
    assert plan is not None and len(plan.host) == 2 and len(plan.device) == 4
    assert "--gen_module_id_file" not in plan.host[1] and plan.module_id_file == "/k/x.module_id"
    assert plan.env["CICC_PATH"] == "/cuda/nvvm/bin"
    unknown = [
        env + host_pp + device + last,                                        # no cudafe++
        env + host_pp + cudafe + cudafe + device + last,                      # two
        env + host_pp + cudafe.replace("--gen_module_id_file ", "") + device + last,
        env + host_pp + cudafe + device + "#$ nvlink x.o\n" + last,           # relocatable device code
        env + host_pp + cudafe + device + "#$ -- Filter Dependencies -- > x.d\n" + last,
        env + host_pp + cudafe + device + '#$ ptxas "/k/x.cudafe1.cpp"\n' + last,   # device reads a host file
        env + host_pp + cudafe + device + "#$ mystery-tool x\n" + last,
    ]
    for text in unknown:
        assert nvcc_overlap.parse_dryrun(text, "/k") is None, text


def test_arguments_it_cannot_overlap_are_left_to_nvcc():
    assert nvcc_overlap._split_args(["-c", "x.cu", "-o", "x.o", "-MD", "-MF", "x.d"]) == (
        ["-c", "x.cu", "-o", "x.o"], "x.d", "x.o")
    for args in (["x.cu", "-o", "x.o"], ["-c", "x.cu"], ["-c", "x.cu", "-o", "x.o", "--time", "t.csv"],
                 ["-c", "x.cu", "-o", "x.o", "-rdc=true"], ["-c", "x.cu", "-o", "x.o", "-MF", "x.d"],
                 ["-c", "x.cu", "-o", "x.o", "--fdevice-time-trace", "-"]):
        assert nvcc_overlap._split_args(args) is None, args


def test_build_ninja_compiles_through_the_driver_unless_a_launcher_or_the_switch_says_no(monkeypatch, tmp_path):
    from test_graph import TOOLS, text_for

    monkeypatch.delenv("FLASHBUILD_NVCC_OVERLAP", raising=False)
    kit = tmp_path / "cuda"
    for tool in ("bin/nvcc", "bin/cudafe++", "nvvm/bin/cicc"):
        (kit / tool).parent.mkdir(parents=True, exist_ok=True)
        (kit / tool).write_text("")
    driver = toolchain.overlap_driver(kit / "bin/nvcc")
    assert driver == (sys.executable, str(DRIVER.resolve()))
    (kit / "bin/cudafe++").unlink()  # a stand-in nvcc (a test's, a wrapper script): run as it is, once a compile
    assert toolchain.overlap_driver(kit / "bin/nvcc") == ()
    tools = graph.Toolchain(**{**TOOLS.__dict__, "overlap": driver})
    _, text = text_for(tools=tools, hdim="64", dtype="fp16", arch="sm80", direction="fwd", causal="off")
    assert re.search(r"^rule nvcc\n  command = \$nvcc_overlap ", text, re.M)
    assert str(DRIVER.resolve()) in text
    cached = graph.Toolchain(**{**TOOLS.__dict__, "overlap": driver, "launcher": "ccache"})
    _, text = text_for(tools=cached, hdim="64", dtype="fp16", arch="sm80", direction="fwd", causal="off")
    assert "nvcc_overlap" not in text  # a compiler cache must see nvcc's own command
    monkeypatch.setenv("FLASHBUILD_NVCC_OVERLAP", "0")
    (kit / "bin/cudafe++").write_text("")
    assert toolchain.overlap_driver(kit / "bin/nvcc") == ()


@requires_nvcc
@pytest.mark.compile
def test_no_writable_temporary_dir_runs_plain_nvcc_never_a_traceback(tree):
    import os

    result = subprocess.run([sys.executable, str(DRIVER), "nvcc", *GENCODE, "-c", "k.cu", "-o", "t.o"], cwd=tree,
                            capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tree / "missing")})
    assert "Traceback" not in result.stderr
    # nvcc itself then reports (or works around) the missing dir, in its own words, with its status
    plain = subprocess.run(["nvcc", *GENCODE, "-c", "k.cu", "-o", "p.o"], cwd=tree, capture_output=True, text=True,
                           env={**os.environ, "TMPDIR": str(tree / "missing")})
    assert result.returncode == plain.returncode
