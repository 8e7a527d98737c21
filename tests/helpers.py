"""Test helpers: a FLASHBUILD_ROOT holding a tiny synthetic kernel (compiles in seconds, so the
build pipeline can be tested end to end), the in-process CLI, the nvcc skip marker."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from flashbuild import env
from flashbuild.cli import cli


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def slow_tests() -> set[str]:
    """The test functions of slow_tests.txt, as `tests/test_x.py::test_y` (the fast tier leaves them out;
    tests/conftest.py marks them). Here, not in conftest.py: tests/fuzz/ has a conftest module of its own."""
    return {line.strip() for line in SLOW_TESTS.read_text().splitlines() if line.strip() and not line.startswith("#")}

REPO = Path(__file__).resolve().parents[1]

# A stand-in for kernels/ampere/fwd_launch.h: the same run_fwd contract (the 5th template argument is
# the variant's features_mask), a trivial kernel.
FAKE_LAUNCH_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild {
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
__global__ void fake_fwd_kernel(FwdParams params) {
  if (threadIdx.x == 0) params.lse[0] = float(kArch * 1000 + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType) + 10 * kFeatures);
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  fake_fwd_kernel<kArch, kHeadDim, kDType, kIsCausal, kFeatures><<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""

# Stand-ins for kernels/hopper/fwd_launch.h and fwd_kernel.h, whose sm90 variants compile their kernel
# device-only in a TU of its own (<variant>_kernel.cu, which includes fwd_kernel.h): run_fwd launches through
# hopper::FwdKernelEntry, which the kernel TU instantiates (and so the kernel) and the variant's TU, host
# code alone (fwd_launch.h), specializes to the fatbin the kernel TU's object embeds
# (templates/fwd_kernel.cu.j2, fwd_instantiate.cu.j2). %(body)s: the kernel's body.
FAKE_HOPPER_FWD_LAUNCH_H = """\
#pragma once
#include "common/kernel_library.h"
#include "common/params.h"

namespace flashbuild {
namespace hopper {
template <int kHeadDim, DType kDType, bool kIsCausal> struct FakeTraits {
  static constexpr int kValue = 90 * 1000 + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType);
};
template <int kHeadDim, DType kDType, bool kIsCausal, int kFeatures = 0>
using VariantTraits = FakeTraits<kHeadDim, kDType, kIsCausal>;

template <class Traits, bool kIsCausal, int kFeatures>
struct FwdKernelEntry {
  static const KernelHandle& get();
};
}  // namespace hopper

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  using Entry = hopper::FwdKernelEntry<hopper::VariantTraits<kHeadDim, kDType, kIsCausal>, kIsCausal, kFeatures>;
  Entry::get().launch(dim3(1), dim3(32), 0, stream, params);
}
}  // namespace flashbuild
"""
FAKE_HOPPER_FWD_KERNEL_H = """\
#pragma once
#include "hopper/fwd_launch.h"

namespace flashbuild::hopper {
template <class Traits, bool kIsCausal, int kFeatures>
__global__ void fake_hopper_fwd_kernel(FwdParams params) {
  %(body)s
}

template <class Traits, bool kIsCausal, int kFeatures>
const KernelHandle& FwdKernelEntry<Traits, kIsCausal, kFeatures>::get() {
  static const KernelHandle kernel = KernelHandle::of(&fake_hopper_fwd_kernel<Traits, kIsCausal, kFeatures>);
  return kernel;
}
}  // namespace flashbuild::hopper
"""
FAKE_HOPPER_FWD_BODY = "if (threadIdx.x == 0) params.lse[0] = float(Traits::kValue + 10 * kFeatures);"


# A stand-in for kernels/ampere/bwd_launch.h: the run_bwd contract of kernels/common/params.h. It
# includes a header of its own (FAKE_BWD_DETAIL), so an edit there concerns the bwd TUs alone.
FAKE_BWD_DETAIL = "ampere/bwd_detail.h"
FAKE_BWD_LAUNCH_H = """\
#pragma once
#include "common/params.h"
#include "ampere/bwd_detail.h"

namespace flashbuild {
template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
__global__ void fake_bwd_kernel(BwdParams params) {
  if (threadIdx.x == 0) params.dq_accum[0] = bwd_detail_value(kArch * 1000 + kHeadDim + (kIsCausal ? 1 : 0) + int(kDType) + 10 * kFeatures);
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_bwd(const BwdParams& params, cudaStream_t stream) {
  fake_bwd_kernel<kArch, kHeadDim, kDType, kIsCausal, kFeatures><<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""


# Stand-ins for kernels/ampere/splitkv_launch.h and fwd_kernel.h: the run_splitkv contract, whose forward kernel
# (one split or several) compiles device-only in a TU of its own (<variant>_kernel.cu, which includes
# fwd_kernel.h): run_splitkv launches through ampere::FwdKernelEntry, which the kernel TU instantiates and the
# variant's TU specializes to its fatbin (templates/splitkv_kernel.cu.j2, splitkv_instantiate.cu.j2).
FAKE_SPLITKV_LAUNCH_H = """\
#pragma once
#include "common/kernel_library.h"
#include "common/params.h"

namespace flashbuild {
namespace ampere {
enum class FwdMode { kFull, kDecode };
template <int kHeadDim, DType kDType> struct SplitKVTraits {
  static constexpr int kValue = kHeadDim + int(kDType);
};
template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
struct FwdKernelEntry {
  static const KernelHandle& get();
};
}  // namespace ampere

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  using Traits = ampere::SplitKVTraits<kHeadDim, kDType>;
  ampere::FwdKernelEntry<Traits, kIsCausal, ampere::FwdMode::kDecode, kFeatures>::get().launch(dim3(1), dim3(32), 0,
                                                                                              stream, params);
}
}  // namespace flashbuild
"""
FAKE_SPLITKV_KERNEL_H = """\
#pragma once
#include "ampere/splitkv_launch.h"

namespace flashbuild::ampere {
template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
__global__ void fake_splitkv_kernel(FwdParams params) {
  if (threadIdx.x == 0) params.lse[0] = float(params.num_splits + Traits::kValue + (kIsCausal ? 1 : 0) + 10 * kFeatures);
}

template <class Traits, bool kIsCausal, FwdMode kMode, int kFeatures>
const KernelHandle& FwdKernelEntry<Traits, kIsCausal, kMode, kFeatures>::get() {
  static const KernelHandle kernel = KernelHandle::of(&fake_splitkv_kernel<Traits, kIsCausal, kMode, kFeatures>);
  return kernel;
}
}  // namespace flashbuild::ampere
"""

# A stand-in for kernels/hopper/splitkv_launch.h: sm90's split-KV at head dims 32-128 launches the Hopper forward's
# kernel compiled for decoding (hopper::FwdKernelEntry with kSplitKVKernel in its features), which its kernel TU
# instantiates from hopper/fwd_kernel.h (FAKE_HOPPER_FWD_KERNEL_H) and the variant's TU specializes to the fatbin.
FAKE_HOPPER_SPLITKV_LAUNCH_H = """\
#pragma once
#include "hopper/fwd_launch.h"

namespace flashbuild {
namespace hopper {
constexpr int kSplitKVKernel = 1 << 8;
template <int kHeadDim, DType kDType> struct FakeSplitKVTraits {
  static constexpr int kValue = kHeadDim + int(kDType);
};
template <int kHeadDim, DType kDType> using SplitKVTraits = FakeSplitKVTraits<kHeadDim, kDType>;
}  // namespace hopper

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  using Entry = hopper::FwdKernelEntry<hopper::SplitKVTraits<kHeadDim, kDType>, kIsCausal, kFeatures | hopper::kSplitKVKernel>;
  Entry::get().launch(dim3(1), dim3(32), 0, stream, params);
}
}  // namespace flashbuild
"""


# Stand-ins for kernels/hopper/bwd_small_kernels.h and splitkv_small_kernels.h: the small kernels one launch TU of each head dim
# and dtype compiles for its group (templates/small_kernels.j2 instantiates these types there).
FAKE_HOPPER_BWD_SMALL_KERNELS_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild::hopper {
template <int kHeadDim, DType kDType> struct FakeBwdTraits {
  static constexpr int kValue = kHeadDim + int(kDType);
};
template <int kHeadDim, DType kDType, bool kIsCausal> using BwdVariantTraits = FakeBwdTraits<kHeadDim, kDType>;
template <class Traits> struct BwdSmallKernels {
  static int value() { return Traits::kValue; }
};
}  // namespace flashbuild::hopper
"""
FAKE_HOPPER_SPLITKV_SMALL_KERNELS_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild::hopper {
template <DType kDType> struct ElementOf { using type = short; };
template <int kHeadDim, class Element> struct SplitKVSmallKernels {
  static int value() { return kHeadDim + int(sizeof(Element)); }
};
}  // namespace flashbuild::hopper
"""


def make_root(base: Path, launch_header: str = FAKE_LAUNCH_H, bwd_launch_header: str = FAKE_BWD_LAUNCH_H,
              hopper_fwd_launch_header: str = FAKE_HOPPER_FWD_LAUNCH_H,
              hopper_fwd_kernel_body: str = FAKE_HOPPER_FWD_BODY) -> Path:
    """A FLASHBUILD_ROOT: the real templates, configs and kernels/common, and the given launch headers
    (each direction's one for both families, but the Hopper forward's: its own contract and kernel)."""
    root = base / "root"
    for sub in ("templates", "configs", "kernels/common"):
        shutil.copytree(REPO / sub, root / sub)
    (root / "kernels" / "ampere").mkdir(parents=True)
    (root / "kernels" / "hopper").mkdir(parents=True)
    (root / "kernels" / "ampere" / "fwd_launch.h").write_text(launch_header)
    (root / "kernels" / "hopper" / "fwd_launch.h").write_text(hopper_fwd_launch_header)
    (root / "kernels" / "hopper" / "fwd_kernel.h").write_text(FAKE_HOPPER_FWD_KERNEL_H % {"body": hopper_fwd_kernel_body})
    (root / "kernels" / "ampere" / "bwd_launch.h").write_text(bwd_launch_header)
    (root / "kernels" / "hopper" / "bwd_launch.h").write_text(bwd_launch_header)  # sm90's backward: the same contract
    (root / "kernels" / "ampere" / "splitkv_launch.h").write_text(FAKE_SPLITKV_LAUNCH_H)
    (root / "kernels" / "ampere" / "fwd_kernel.h").write_text(FAKE_SPLITKV_KERNEL_H)
    (root / "kernels" / "hopper" / "splitkv_launch.h").write_text(FAKE_HOPPER_SPLITKV_LAUNCH_H)
    (root / "kernels" / "hopper" / "bwd_small_kernels.h").write_text(FAKE_HOPPER_BWD_SMALL_KERNELS_H)
    (root / "kernels" / "hopper" / "splitkv_small_kernels.h").write_text(FAKE_HOPPER_SPLITKV_SMALL_KERNELS_H)
    (root / "kernels" / FAKE_BWD_DETAIL).write_text(
        "#pragma once\nnamespace flashbuild {\n__device__ inline float bwd_detail_value(int x) { return float(x); }\n}\n")
    return root


def load_script(path: Path, name: str):
    """A study script (benchmarks/...) imported as module `name`, registered in sys.modules first (its
    dataclasses look their module up there)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_cli(*args: str):
    """Invoke the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(cli, list(args))


requires_nvcc = pytest.mark.skipif(env.find_nvcc() is None,
                                   reason="nvcc not found (CUDA_HOME, PATH, /usr/local/cuda, nvidia-cuda-nvcc wheel)")


def plain_selection(direction: str, hdims: str | int, causal: str, defines: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The arguments of a plain fp16 sm90 selection (no local window, no softcap) of `direction` (fwd, bwd), head dims
    `hdims` (e.g. "96,128"), causal on / off / both, built with nvcc `defines` for the whole build."""
    return ["--hdim", str(hdims), "--dtype", "fp16", "--arch", "sm90", "--direction", direction, "--causal", causal,
            "--no-local", "--no-softcap", *(f"--nvcc-flag={d}" for d in defines)]


# Local-memory bytes (stored, loaded) ptxas spills in a default Hopper backward main kernel that the study which made it
# the default timed with them: hdim 64 causal with warpgroup 1's dQ from registers (kDqHybrid,
# benchmarks/hopper_bwd_dq_hybrid/: 1.010-1.027x faster than the kernel without spills, nvcc 13.0). Every other one has
# none, or the 4 bytes test_compile.py names.
BWD_MEASURED_SPILLS = {"bwd_hdim64_fp16_causal_sm90_kernel": (12, 20)}


_SHARED_BUILDS: dict[tuple[str, ...], tuple[Path, str]] = {}


def shared_build(args: list[str]) -> tuple[Path, str]:
    """`python3 -m flashbuild ARGS --compile-only --jobs 2 --verbose` (real nvcc, no GPU), once per test session for
    each ARGS: the build directory and the build's output (ptxas' warnings among it). Several files of the compile tier
    read the same default kernels (the backward's hdim 96 / 128 causal, the forward's hdim 128, ...): one build each
    keeps CI's 2-core run inside its time. ARGS as plain_selection gives them (the key is ARGS as given)."""
    key = tuple(args)
    if key not in _SHARED_BUILDS:
        cache = Path(tempfile.mkdtemp(prefix="flashbuild-test-build-"))
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
        environ.pop("FLASHBUILD_ROOT", None)
        done = subprocess.run([sys.executable, "-m", "flashbuild", *args, "--compile-only", "--jobs", "2", "--verbose"],
                              capture_output=True, text=True, env=environ, cwd=REPO)
        assert done.returncode == 0, done.stderr[-3000:]
        (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
        _SHARED_BUILDS[key] = (build_dir, done.stdout + done.stderr)
    return _SHARED_BUILDS[key]


def compile_kernel_object(args: list[str], variant: str) -> tuple[Path, str]:
    """The object of `variant`'s TU (e.g. fwd_hdim128_fp16_causal_sm90_kernel) in the shared build of ARGS
    (shared_build), and the build's output."""
    build_dir, output = shared_build(args)
    return build_dir / "obj" / f"{variant}.o", output


def main_kernel_sass(direction: str, hdim: int, causal: bool, defines: list[str], hdims: str | None = None) -> list[str]:
    """The Hopper main kernel of the plain fp16 `direction` (fwd or bwd) of hdim, causal or not, built with `defines`
    for the whole build (shared_build of the head dims `hdims`, hdim alone by default): its instructions
    (sass_instructions). It must neither spill nor use the stack."""
    name = f"{direction}_hdim{hdim}_fp16{'_causal' if causal else ''}_sm90_kernel"
    obj, _ = compile_kernel_object(plain_selection(direction, hdims or hdim, "on" if causal else "off", defines), name)
    from flashbuild.debug import inspection

    (main,) = [r for r in inspection.inspect_object(name, obj) if f"{direction}_kernel" in r.kernel]
    assert main.spill_store_bytes == 0 and main.spill_load_bytes == 0 and main.stack_bytes == 0, main
    return sass_instructions(inspection.sass_text(obj))


def sass_instructions(sass: str) -> list[str]:
    """The instructions of `cuobjdump -sass` text with their addresses, immediates and encodings left out: two builds'
    kernels compare equal when ptxas emitted the same code."""
    lines = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", sass, flags=re.M)
    return [re.sub(r"0x[0-9a-f]+", "IMM", line) for line in lines]


def run_host_program(tmp_path: Path, source: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Compile `source` (a .cu of host code against kernels/ and the CUTLASS headers) with nvcc for the host and run
    it on the CPU; skips without the CUTLASS headers, fails on a compile error. tests/host/ holds such walks."""
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        pytest.skip("the CUTLASS headers (nvidia-cutlass wheel) are not installed")
    binary = tmp_path / source.stem
    compiled = subprocess.run([str(env.find_nvcc().path), "-std=c++17", "-O2", "--expt-relaxed-constexpr",
                               f"-I{REPO / 'kernels'}", f"-I{cutlass}", "-x", "cu", str(source), "-o", str(binary)],
                              capture_output=True, text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    return subprocess.run([str(binary)], capture_output=True, text=True, timeout=timeout)



def run_host_walk(tmp_path: Path, source: Path, timeout: int = 600) -> str:
    """run_host_program for a walk of tests/host/ that prints "<cases> cases, <n> fail" last (check.h): that line when
    the walk exited 0, else its output's tail (the failed cases it printed first, and stderr)."""
    done = run_host_program(tmp_path, source, timeout=timeout)
    if done.returncode == 0:
        return done.stdout.rstrip().rsplit("\n", 1)[-1]
    return f"exit {done.returncode}: {done.stdout[-3000:]}{done.stderr[-3000:]}"

# A stand-in for nvcc (and the link step): writes the object and its depfile, logs its arguments
# (FAKE_NVCC_LOG), and with FAKE_NVCC_SLEEP=S runs a child for S seconds first, as nvcc runs cicc, and
# records "nvcc_pid child_pid" in FAKE_NVCC_PIDS. It lets the build pipeline run end to end with
# no CUDA toolkit, in milliseconds, and lets tests kill a build while its "compilers" run.
FAKE_NVCC = """\
#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
if "--version" in args:
    print("Cuda compilation tools, release 13.0, V13.0.88")
    sys.exit(0)
if os.environ.get("FAKE_NVCC_LOG"):
    with open(os.environ["FAKE_NVCC_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
seconds = os.environ.get("FAKE_NVCC_SLEEP")
if seconds:
    child = subprocess.Popen(["sleep", seconds])
    if os.environ.get("FAKE_NVCC_PIDS"):
        with open(os.environ["FAKE_NVCC_PIDS"], "a") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}\\n")
    child.wait()
out = args[args.index("-o") + 1]
times = [a.split("=", 1)[1] for a in args if a.startswith("--time=")]
if times and "-c" in args:  # as nvcc --time: append one row per phase (the header when the file is new)
    source, new = args[args.index("-c") + 1], not os.path.exists(times[0])
    with open(times[0], "a") as f:
        if new:
            f.write("source file name , phase name , phase input files , phase output file , arch , tool, metric , unit\\n")
        for phase, ms in (("gcc (preprocessing 4)", 100), ("cudafe++", 400), ("cicc", 2000), ("ptxas", 50),
                          ("fatbinary", 5), ("gcc (compiling)", 250)):
            f.write(f"{{source}} , {{phase}} , in , out , compute_90a , nvcc , {{ms}}.0 , ms\\n")
if "--fdevice-time-trace=-" in args and "-c" in args:  # as nvcc: a Chrome trace beside the object
    events = [{{"ph": "X", "pid": 8, "tid": 0, "ts": 0, "dur": 1500000, "name": "CUDA C++ Front-End"}},
              {{"ph": "X", "pid": 8, "tid": 0, "ts": 100000, "dur": 1000000, "name": "Instantiating Template Function",
               "args": {{"detail": "cute::get [cute::get<0>]"}}}},
              {{"ph": "X", "pid": 8, "tid": 0, "ts": 1500000, "dur": 500000, "name": "LibNVVM"}}]
    with open(out + ".json", "w") as f:
        json.dump({{"traceEvents": events}}, f)
if "-MF" in args:
    with open(args[args.index("-MF") + 1], "w") as f:
        f.write(out.replace(" ", "\\\\ ") + ":\\n")
with open(out, "w") as f:
    f.write("object")
"""


def make_fake_cuda(base: Path) -> Path:
    """A CUDA_HOME whose bin/nvcc is FAKE_NVCC; returns the CUDA_HOME."""
    import sys

    home = base / "fake-cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(0o755)
    return home


def expect_env_error(monkeypatch, env: str, value: str, call, *phrases: str) -> None:
    """With `env` set to `value` (a setting the launcher reads at every launch), `call` raises an error that names the
    variable and holds each of `phrases` (what the settings are): never a traceback of ours, never a silent default."""
    monkeypatch.setenv(env, value)
    with pytest.raises(Exception, match=env) as error:
        call()
    for phrase in phrases:
        assert phrase in str(error.value), (phrase, str(error.value))


def check_close(label, got, ref, low, kind="grad", eps=None):
    """The correctness rule (docs/correctness.md) for one GPU tensor against its fp32 reference `ref`:
    flashbuild's own comparator (flashbuild.debug.checking.compare), so GPU tests and `flashbuild test`
    hold kernels to one rule. `low` is the same math by PyTorch in the input dtype; `kind` picks the eps
    (out, lse or grad; checking.EPS); `eps` overrides it only where a test says why. NaN never passes."""
    from flashbuild.debug.checking import compare
    metric = compare(kind, got, ref, low, eps)
    print(f"  {label}: max abs err {metric.max_abs_err:.3e}, PyTorch's own err {metric.ref_err:.3e}, "
          f"tol {metric.tol:.3e}, mismatch {metric.mismatch_pct:.3f}%")
    assert metric.passed, (f"{label}: {metric.reason} (max abs err {metric.max_abs_err:.3e}, tolerance "
                           f"{metric.tol:.3e}, {metric.mismatch_pct:.3f}% of elements past it)")
    return metric
