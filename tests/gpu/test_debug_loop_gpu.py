"""`flashbuild test`, `bench` and `test --sanitize` on a GPU (skipped without a CUDA device): the
commands a kernel developer runs after each edit, end to end on one small slice."""

from __future__ import annotations

import json
import shutil
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

from flashbuild.debug import bench, checking, runtime
from flashbuild.pipeline import builder
from flashbuild import env  # noqa: E402
from flashbuild.selection.variants import Variant, implemented_directions  # noqa: E402
from helpers import make_root, run_cli  # noqa: E402

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "native", "--causal", "both"]  # every direction


@pytest.fixture(scope="module")
def ext():
    started = time.monotonic()
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="native", causal="both")
    module = runtime.load_build(selection, options)
    print(f"\nbuild + load: {time.monotonic() - started:.1f}s; variants: {module.variants()}")
    return module


def test_poisoning_makes_unwritten_memory_read_as_nan():
    size = 3 << 20
    checking.poison("cuda", [size])
    fresh = torch.empty(size // 2, dtype=torch.float16, device="cuda")  # what the binding's at::empty gets
    assert torch.isnan(fresh).all()


def test_every_variant_of_the_build_passes_the_quick_shapes(ext, tmp_path):
    out = tmp_path / "test.json"
    result = run_cli("test", *SLICE, "--shapes", "quick", "--json", str(out))
    print(result.stdout)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    variants = [Variant.from_name(name) for name in ext.variants()]
    expected = sum(len(checking.checks_for(v, checking.FEATURE_SHAPE_SETS["quick"] if v.features
                                           else checking.SHAPES_QUICK)) for v in variants)
    assert data["passed"] and len(data["rows"]) == expected
    assert {r["variant"].split("_")[0] for r in data["rows"]} == set(implemented_directions())
    assert any("window" in r["shape"] for r in data["rows"]) and any("softcap" in r["shape"] for r in data["rows"])


def test_a_wrong_kernel_is_caught(ext):
    """The checks fail a module whose forward returns a slightly wrong output."""
    class Off:
        def flash_attn_func(self, q, k, v, causal=False, softmax_scale=None, return_lse=False):
            out, lse = ext.flash_attn_func(q, k, v, causal=causal, return_lse=True)
            out[:, -1] += 0.01
            return out, lse

    variant = Variant.from_name(ext.variants()[0])
    row = checking.check(Off(), variant, checking.SHAPES_QUICK[0], seed=0)
    assert row.status == "FAIL" and row.worst.tensor == "out"


def test_bench_measures_ours_beside_sdpa(ext):
    variant = next(Variant.from_name(n) for n in ext.variants() if n.startswith("bwd_") and "_causal" in n)
    results = bench.measure(ext, variant, 1024, reps=3, has_fwd=True)
    assert [r.backend for r in results] == list(bench.BACKENDS)
    ours = results[0]
    assert ours.ms and ours.ms > 0 and ours.tflops > 1, ours
    assert all(r.ms is None and r.note or r.tflops > 0 for r in results)  # a number, or n/a with the reason
    print("\n" + bench.table(results))


def test_bench_measures_a_feature_variant_with_a_window_and_softcap(ext):
    variant = next(Variant.from_name(n) for n in ext.variants() if n.startswith("fwd_") and n.endswith("_local_softcap"))
    windowed = bench.measure(ext, variant, 2048, reps=3, has_fwd=True, window=(256, 0))
    assert windowed[0].backend == bench.OURS and windowed[0].tflops > 1 and windowed[0].asked == "window 256,0"
    efficient = next(r for r in windowed if r.backend == "sdpa-efficient")  # the window as a boolean mask
    assert efficient.ms or efficient.note
    capped = bench.measure(ext, variant, 2048, reps=3, has_fwd=True, softcap=30.0)
    assert capped[0].tflops > 1 and all(r.ms is None and "softcap" in r.note for r in capped[1:])
    print("\n" + bench.table(windowed + capped))


def test_bench_command_writes_json_csv_plot_and_compares(ext, tmp_path):
    files = {name: tmp_path / name for name in ("b.json", "b.csv", "b.png")}
    result = run_cli("bench", *SLICE, "--direction", "fwd", "--seqlens", "1024,2048", "--reps", "3",
                     "--json", str(files["b.json"]), "--csv", str(files["b.csv"]), "--plot", str(files["b.png"]))
    assert result.exit_code == 0, result.output
    assert all(f.is_file() and f.stat().st_size > 0 for f in files.values())
    again = run_cli("bench", "--results", str(files["b.json"]), "--compare", str(files["b.json"]))
    assert again.exit_code == 0 and "0 regressions" in again.stdout


def test_bench_alone_times_windows_and_records_it(ext, tmp_path):
    """--alone: each backend in windows of its own calls; the rows' reps are calls of a window, and the --json says
    how the run was timed."""
    out = tmp_path / "a.json"
    result = run_cli("bench", *SLICE, "--direction", "fwd", "--seqlens", "2048", "--alone", "0.2", "--json", str(out))
    assert result.exit_code == 0, result.output
    info, rows = bench.load_results(str(out), "--results")
    assert info["timing"] == bench.timing_name(0.2) and "--alone 0.2" in info["command"]
    ours = [r for r in rows if r.backend == bench.OURS]
    assert ours and all(r.tflops > 1 and r.reps >= bench.ALONE_BATCH for r in ours), ours


@pytest.mark.skipif(env.find_cuda_tool("compute-sanitizer") is None, reason="compute-sanitizer not found")
def test_sanitize_runs_the_checks_under_memcheck(ext, tmp_path):
    out = tmp_path / "s.json"
    result = run_cli("test", *SLICE, "--shapes", "quick", "--sanitize", "--json", str(out))
    print(result.output)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["passed"]


# A forward kernel that writes 4 TiB past the lse: outside every allocation, so memcheck reports it.
OOB_LAUNCH_H = """\
#pragma once
#include "common/params.h"

namespace flashbuild {
__global__ void oob_fwd_kernel(FwdParams params) {
  if (threadIdx.x == 0 && blockIdx.x == 0) params.lse[1ll << 40] = 1.0f;
}

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_fwd(const FwdParams& params, cudaStream_t stream) {
  oob_fwd_kernel<<<1, 32, 0, stream>>>(params);
}
}  // namespace flashbuild
"""


@pytest.mark.skipif(env.find_cuda_tool("compute-sanitizer") is None, reason="compute-sanitizer not found")
def test_sanitize_fails_a_kernel_that_writes_out_of_bounds(tmp_path, monkeypatch):
    # On sm90 the forward variant's kernel is the Hopper contract's (its own device-only TU): the same write.
    root = make_root(tmp_path, OOB_LAUNCH_H,
                     hopper_fwd_kernel_body="if (threadIdx.x == 0 && blockIdx.x == 0) params.lse[1ll << 40] = 1.0f;")
    shutil.copytree(env.kernels_dir() / "binding", root / "kernels" / "binding")  # a linked build needs it
    monkeypatch.setenv("FLASHBUILD_ROOT", str(root))
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "cache"))
    result = run_cli("test", "--hdim", "64", "--dtype", "fp16", "--arch", "native", "--direction", "fwd",
                     "--causal", "off", "--no-local", "--no-softcap", "--shapes", "quick", "--sanitize")
    print(result.output)
    assert result.exit_code == 1
    first = next(line for line in result.stdout.splitlines() if line.startswith("fwd_hdim64_fp16_sm"))
    assert "FAIL (out-of-bounds: Invalid __global__ write of size 4 bytes" in first
    assert "compute-sanitizer: ERROR SUMMARY:" in result.stderr
