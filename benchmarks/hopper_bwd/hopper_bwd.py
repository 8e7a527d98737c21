"""Dev harness for the Hopper backward (kernels/hopper/bwd_*.h), standalone from the flashbuild package.

On a machine with an sm90 GPU, nvcc, ninja and a CUDA build of torch:

    python3 benchmarks/hopper_bwd/hopper_bwd.py all --out DIR [--jobs 16] [--cutlass INCLUDE_DIR]

1. build: one TU per variant (run_bwd as the binding calls it from hopper/bwd_launch.h, the Hopper
   launcher alone, the Ampere-path backward alone), ninja with flashbuild's nvcc flags for sm_90a;
   per-TU wall time, peak RSS and ptxas registers/spills recorded; a small torch extension
   (binding.cpp, generated) fills BwdParams as kernels/binding/flash_api.cpp does and links them.
2. check: dq, dk, dv of every variant against float32 autograd of the attention (fresh random
   inputs; out and lse from the float32 forward), outputs poisoned with NaN: odd seqlens (1, 17,
   113, 1023, 4097), seqlen_q != seqlen_k both ways (causal bottom-right: rows with no key), GQA
   8:1 and MQA (dk/dv summed over the group as the binding does), Q/K/V views of one packed QKV
   tensor. Pass: max|ours - ref| <= 2 * max|torch autograd in fp16/bf16 - ref| + 1e-5 for each of
   dq, dk, dv; NaN never passes. Also the routing: every routed call takes the Hopper kernel, features
   or not (a feature kernel, local + softcap compiled in, with the features off and with softcap or a
   window on, checked against the reference too).
3. bench: TFLOPS of the backward at 16k tokens per batch, model dim 2048 (nheads = 2048 / hdim),
   seqlen 1k/4k/16k, causal and not: ours (run_bwd: dsum, main kernel, dQ conversion, plus the
   zeroing of dq_accum that the binding pays), the Ampere path (same), SDPA flash and SDPA cuDNN
   backward (torch.autograd.grad of one recorded forward), timed in turns with CUDA events, median
   of --reps rounds after warm-up, 3 input sets rotated past L2. FLOPs = 2.5 * 4 b h s^2 d, halved
   when causal.
The JSON results go to DIR; the bench table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
NVCC_FLAGS = ["-std=c++17", "-O3", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-DNDEBUG",
              "-gencode", "arch=compute_90a,code=sm_90a", "-Xptxas", "-v"]
LOCAL, SOFTCAP = 1, 2  # common/params.h Feature bits
DQ_ACCUM_ROW_PAD = 128  # common/params.h kDqAccumRowPad


@dataclass(frozen=True)
class Sweep:
    """A tuning variant: BwdTraits<hdim, block_m, 128, Element, dq_order> launched directly."""
    block_m: int
    dq_order: str = "RowMajor"  # hopper::DqOrder: RowMajor, Fragment, FragmentBulk
    defer_dq: bool = False  # BwdTraits::kDeferDq
    dq_first: bool | None = None  # BwdTraits::kDqFirst; None: the head dim's default (bwd_tile)

    @property
    def tag(self) -> str:
        order = {"RowMajor": "rows", "Fragment": "frag", "FragmentBulk": "bulk"}[self.dq_order]
        step = "" if self.dq_first is None else "first" if self.dq_first else "last"
        return f"m{self.block_m}{order}{'defer' if self.defer_dq else ''}{step}"


@dataclass(frozen=True)
class Variant:
    hdim: int
    dtype: str  # fp16 | bf16
    causal: bool
    features: int = 0
    sweep: Sweep | None = None

    @property
    def name(self) -> str:
        base = f"h{self.hdim}_{self.dtype}_c{int(self.causal)}_f{self.features}"
        return base + (f"_{self.sweep.tag}" if self.sweep else "")

    @property
    def default_name(self) -> str:
        return f"h{self.hdim}_{self.dtype}_c{int(self.causal)}_f{self.features}"

    @property
    def cpp_dtype(self) -> str:
        return "flashbuild::DType::kFp16" if self.dtype == "fp16" else "flashbuild::DType::kBf16"


MAIN = [Variant(h, d, c) for h in (64, 128) for d in ("fp16", "bf16") for c in (False, True)]
FEATURES = [Variant(128, "fp16", c, LOCAL | SOFTCAP) for c in (False, True)]
# The dq_accum orders against the default (kFragmentBulk since run 1): the row-major red.v2 order (run 1's
# default) and the fragment order with red.v4 from the consumers. Run 1 (commit e688872) had row-major as
# the default and timed the others as sweeps: see README.md.
SWEEPS = [Variant(h, "fp16", c, 0, Sweep(64 if h == 128 else 128, o)) for o in ("RowMajor", "Fragment")
          for h in (64, 128) for c in (False, True)]
SWEEPS_TILE = [Variant(64, "fp16", False, 0, Sweep(64, "FragmentBulk"))]  # hdim 64 with 64-row query blocks
# Each step's reductions deferred under the next step's first products (ptxas spills 496 bytes there).
SWEEPS_DEFER = [Variant(h, "fp16", c, 0, Sweep(64 if h == 128 else 128, "Fragment", True, False))
                for h in (64, 128) for c in (False, True)]
# The step order that is not the head dim's default (BwdTraits::kDqFirst: dQ's product before dK's, its
# hand-off under dK's product; the default since the first of these runs for hdim 96 and 128, not 64).
SWEEPS_DQ_ORDER = [Variant(h, "fp16", c, 0, Sweep(64 if h == 128 else 128, "FragmentBulk", dq_first=h == 64))
                   for h in (64, 128) for c in (False, True)]
# hdim 96 (dQ first by default), with its default variants to time the old order against.
SWEEPS_DQ_ORDER_96 = [Variant(96, "fp16", c, 0, s) for s in (None, Sweep(64, "FragmentBulk", dq_first=False))
                      for c in (False, True)]
GROUPS = {"main": MAIN, "features": FEATURES, "sweeps": SWEEPS, "tile": SWEEPS_TILE, "defer": SWEEPS_DEFER,
          "dqorder": SWEEPS_DQ_ORDER, "dqorder96": SWEEPS_DQ_ORDER_96}


def tu_text(v: Variant) -> str:
    if v.sweep:
        elem = "cutlass::half_t" if v.dtype == "fp16" else "cutlass::bfloat16_t"
        dq_first = {None: f"flashbuild::hopper::bwd_tile({v.hdim}).dq_first", True: "true", False: "false"}[
            v.sweep.dq_first]
        return f"""// Generated by benchmarks/hopper_bwd/hopper_bwd.py for {v.name}. Do not edit.
#include "hopper/bwd_launch.h"
#include "hopper/bwd_kernel.h"  // the main kernel, compiled here with its launch (BwdKernelEntry, bwd_params.h)
#include "hopper/bwd_small_kernels.h"  // the small kernels (BwdSmallKernels), compiled here too
namespace fbdev {{
void hopper_{v.name}(const flashbuild::BwdParams& p, cudaStream_t s) {{
  using Traits = flashbuild::hopper::BwdTraits<{v.hdim}, {v.sweep.block_m}, 128, {elem},
                                               flashbuild::hopper::DqOrder::k{v.sweep.dq_order},
                                               {'true' if v.sweep.defer_dq else 'false'},
                                               {dq_first}>;
  flashbuild::hopper::launch_bwd<Traits, {'true' if v.causal else 'false'}, {v.features}>(p, s);
}}
}}  // namespace fbdev
"""
    args = f"90, {v.hdim}, {v.cpp_dtype}, {'true' if v.causal else 'false'}, {v.features}"
    causal = "true" if v.causal else "false"
    return f"""// Generated by benchmarks/hopper_bwd/hopper_bwd.py for {v.name}. Do not edit.
#include "hopper/bwd_launch.h"
#include "hopper/bwd_kernel.h"  // the main kernel, compiled here with its launch (BwdKernelEntry, bwd_params.h)
#include "hopper/bwd_small_kernels.h"  // the small kernels (BwdSmallKernels), compiled here too
#include "ampere/bwd_path.h"  // the Ampere-path backward: the harness calls it (ampere_*), in this TU
template void flashbuild::run_bwd<{args}>(const flashbuild::BwdParams&, cudaStream_t);
namespace fbdev {{
void routed_{v.name}(const flashbuild::BwdParams& p, cudaStream_t s) {{ flashbuild::run_bwd<{args}>(p, s); }}
void hopper_{v.name}(const flashbuild::BwdParams& p, cudaStream_t s) {{
  flashbuild::hopper::run_bwd_sm90<{v.hdim}, {v.cpp_dtype}, {causal}, {v.features}>(p, s);
}}
void ampere_{v.name}(const flashbuild::BwdParams& p, cudaStream_t s) {{ flashbuild::ampere::run_bwd_path<{args}>(p, s); }}
bool can_run_{v.name}(const flashbuild::BwdParams& p) {{  // run_bwd takes the call (else it is an error)
  return flashbuild::hopper::can_run(p, {v.hdim}, 2);
}}
}}  // namespace fbdev
"""


BINDING = r"""// Generated by benchmarks/hopper_bwd/hopper_bwd.py. Do not edit.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "common/params.h"

using flashbuild::BwdParams;
using Fn = void (*)(const BwdParams&, cudaStream_t);
using CanFn = bool (*)(const BwdParams&);
namespace fbdev {
%DECLS%
}  // namespace fbdev

namespace {
struct Entry { const char* name; Fn routed; Fn hopper; Fn ampere; CanFn can_run; };  // sweeps: hopper only
const Entry kEntries[] = {
%ENTRIES%
};

const Entry& find(const std::string& name) {
  for (const Entry& e : kEntries) if (name == e.name) return e;
  TORCH_CHECK(false, "hopper_bwd_dev: no variant ", name);
}

struct Strides { int64_t batch, row, head; };
Strides strides_of(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }
}  // namespace

// Fills BwdParams as kernels/binding/flash_api.cpp does (dense calls; dk/dv per query head, dq_accum
// (batch, nheads, seqlen_q rounded up to kDqAccumRowPad, head_dim), zeroed here as the binding's
// at::zeros does) and calls one entry; returns whether the call took (would take) the Hopper kernel.
bool bwd(const std::string& name, const std::string& path, const at::Tensor& dout, const at::Tensor& q,
         const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, at::Tensor& dsum,
         at::Tensor& dq_accum, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv, bool causal, double softmax_scale,
         int64_t window_left, int64_t window_right, double softcap) {
  const Entry& e = find(name);
  c10::cuda::CUDAGuard guard(q.device());
  dq_accum.zero_();
  BwdParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.dout = dout.data_ptr(), p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>(), p.dsum = dsum.data_ptr<float>(), p.dq_accum = dq_accum.data_ptr<float>();
  p.dq = dq.data_ptr(), p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
  const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v), sdo = strides_of(dout);
  const Strides so = strides_of(out), sdq = strides_of(dq), sdk = strides_of(dk);
  p.o_batch_stride = so.batch, p.o_row_stride = so.row, p.o_head_stride = so.head;
  p.q_batch_stride = sq.batch, p.q_row_stride = sq.row, p.q_head_stride = sq.head;
  p.k_batch_stride = sk.batch, p.k_row_stride = sk.row, p.k_head_stride = sk.head;
  p.v_batch_stride = sv.batch, p.v_row_stride = sv.row, p.v_head_stride = sv.head;
  p.do_batch_stride = sdo.batch, p.do_row_stride = sdo.row, p.do_head_stride = sdo.head;
  p.dq_out_batch_stride = sdq.batch, p.dq_out_row_stride = sdq.row, p.dq_out_head_stride = sdq.head;
  p.dq_batch_stride = dq_accum.stride(0), p.dq_head_stride = dq_accum.stride(1);
  p.dk_batch_stride = sdk.batch, p.dk_row_stride = sdk.row, p.dk_head_stride = sdk.head;
  p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1);
  p.batch = q.size(0), p.seqlen_q = q.size(1), p.seqlen_k = k.size(1);
  p.nheads = q.size(2), p.nheads_k = k.size(2), p.head_dim = q.size(3), p.o_head_dim = out.size(3);
  p.softmax_scale = softmax_scale;
  p.softmax_scale_log2 = softmax_scale * 1.4426950408889634;
  // As the binding: an unbounded window side bounds nothing; a causal call's right side is 0.
  const int64_t unbounded = int64_t(p.seqlen_q) + p.seqlen_k;
  p.window_left = window_left < 0 ? unbounded : window_left;
  p.window_right = causal ? 0 : (window_right < 0 ? unbounded : window_right);
  p.softcap = softcap;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (path == "hopper") { e.hopper(p, stream); return true; }
  TORCH_CHECK(e.routed, name, " has only the hopper path");
  if (path == "routed") { e.routed(p, stream); return e.can_run(p); }
  TORCH_CHECK(path == "ampere", "hopper_bwd_dev: no path ", path);
  e.ampere(p, stream);
  return false;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bwd", &bwd); }
"""


def binding_text(variants: list[Variant]) -> str:
    decls, entries = [], []
    for v in variants:
        n = v.name
        if v.sweep:
            decls.append(f"void hopper_{n}(const BwdParams&, cudaStream_t);")
            entries.append(f'  {{"{n}", nullptr, fbdev::hopper_{n}, nullptr, nullptr}},')
            continue
        decls += [f"void routed_{n}(const BwdParams&, cudaStream_t);", f"void hopper_{n}(const BwdParams&, cudaStream_t);",
                  f"void ampere_{n}(const BwdParams&, cudaStream_t);", f"bool can_run_{n}(const BwdParams&);"]
        entries.append(f'  {{"{n}", fbdev::routed_{n}, fbdev::hopper_{n}, fbdev::ampere_{n}, fbdev::can_run_{n}}},')
    return BINDING.replace("%DECLS%", "\n".join(decls)).replace("%ENTRIES%", "\n".join(entries))


def write_if_different(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# ------------------------------------------------------------------------------------------------
# Build

MEASURE = r"""import json, resource, subprocess, sys, time
out = sys.argv[1]
t0 = time.time()
rc = subprocess.call(sys.argv[3:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"wall_s": round(time.time() - t0, 2), "peak_rss_mib": round(ru.ru_maxrss / 1024, 1), "rc": rc}, open(out, "w"))
sys.exit(rc)
"""


def nvcc() -> str:
    import shutil

    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def ptxas_summary(text: str) -> list[dict]:
    """Registers / spills of each kernel in a TU's ptxas -v output."""
    out, cur = [], None
    for line in text.splitlines():
        if "Compiling entry function" in line:
            name = line.split("'")[1]
            kind = "hopper_bwd" if "6hopper10bwd_kernel" in name else "ampere_bwd" if "6ampere10bwd_kernel" in name else None
            cur = {"kernel": kind} if kind else None
            if cur:
                out.append(cur)
        elif cur is not None and "spill stores" in line:
            cur["spill"] = line.strip()
        elif cur is not None and "Used" in line and "registers" in line:
            cur["regs"] = line.split("Used")[1].split("registers")[0].strip()
    return out


def build(variants: list[Variant], build_dir: Path, cutlass: Path, jobs: int, log, compile_only: bool = False):
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "measure.py").write_text(MEASURE)
    for v in variants:
        write_if_different(build_dir / f"{v.name}.cu", tu_text(v))
    flags = NVCC_FLAGS + [f"-I{KERNELS}", f"-I{cutlass}"]
    lines = ["ninja_required_version = 1.5",
             f"flags = {' '.join(flags)}",
             f"rule nvcc\n  command = {sys.executable} measure.py $out.json -- {nvcc()} $flags -MD -MF $out.d -c $in -o $out "
             f"> $out.log 2>&1\n  depfile = $out.d\n  deps = gcc\n  description = $out"]
    lines += [f"build {v.name}.o: nvcc {v.name}.cu" for v in variants]
    write_if_different(build_dir / "build.ninja", "\n".join(lines) + "\n")
    t0 = time.time()
    rc = subprocess.call(["ninja", "-j", str(jobs)], cwd=build_dir)
    kernels_s = time.time() - t0
    tus = {}
    for v in variants:
        m = build_dir / f"{v.name}.o.json"
        tus[v.name] = json.loads(m.read_text()) if m.exists() else {"rc": None}
        lf = build_dir / f"{v.name}.o.log"
        tus[v.name]["ptxas"] = ptxas_summary(lf.read_text()) if lf.exists() else []
    failed = [n for n, t in tus.items() if t.get("rc") != 0]
    if rc != 0 or failed:
        for n in failed:
            log(f"FAILED {n}:\n" + (build_dir / f"{n}.o.log").read_text()[-3000:])
        raise SystemExit(f"kernel build failed: {failed}")
    info = {"kernels_wall_s": round(kernels_s, 1), "tus": tus}
    if compile_only:
        return None, info
    import torch.utils.cpp_extension as ext

    write_if_different(build_dir / "binding.cpp", binding_text(variants))
    t1 = time.time()
    ext_dir = build_dir / "ext"
    ext_dir.mkdir(exist_ok=True)
    mod = ext.load(name="hopper_bwd_dev", sources=[str(build_dir / "binding.cpp")], extra_include_paths=[str(KERNELS)],
                   extra_cflags=["-O2"], extra_ldflags=[str(build_dir / f"{v.name}.o") for v in variants], with_cuda=True,
                   build_directory=str(ext_dir), verbose=False)
    info["binding_link_s"] = round(time.time() - t1, 1)
    return mod, info


# ------------------------------------------------------------------------------------------------
# Reference (flash-attn semantics, as benchmarks/hopper_fwd/hopper_fwd.py and flashbuild/reference.py)


def attention_ref(q, k, v, causal, scale, window=(-1, -1), softcap=0.0, upcast=True):
    import torch

    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    compute = torch.float32 if upcast else q.dtype
    g = h // hk
    qc, kc, vc = q.to(compute), k.to(compute).repeat_interleave(g, 2), v.to(compute).repeat_interleave(g, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", qc, kc) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    left, right = window
    if causal:
        right = 0
    if left >= 0 or right >= 0:
        diag = torch.arange(sq, device=q.device).view(-1, 1) + (sk - sq)
        cols = torch.arange(sk, device=q.device).view(1, -1)
        hidden = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
        if right >= 0:
            hidden |= cols > diag + right
        if left >= 0:
            hidden |= cols < diag - left
        s = s.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", p, vc)
    return out, torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


def grads_ref(q, k, v, dout, causal, scale, window, softcap, upcast):
    """(out, lse, dq, dk, dv) by autograd, in float32 (upcast) or in the inputs' dtype."""
    import torch

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = attention_ref(*leaves, causal, scale, window, softcap, upcast)
    dq, dk, dv = torch.autograd.grad(out, leaves, dout.to(out.dtype))
    return out.detach(), lse.detach(), dq, dk, dv


def max_err(x, ref):
    """max |x - ref|; NaN anywhere counts NaN."""
    import torch

    x, ref = x.float(), ref.float()
    if torch.isnan(x).any():
        return float("nan")
    return float((x - ref).abs().max()) if x.numel() else 0.0


# ------------------------------------------------------------------------------------------------
# Check


@dataclass
class Case:
    batch: int
    seqlen_q: int
    seqlen_k: int
    nheads: int
    nheads_k: int
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    packed: bool = False  # q, k, v are views of one (b, s, 3, h, d) tensor

    def label(self) -> str:
        s = f"b{self.batch} sq{self.seqlen_q} sk{self.seqlen_k} h{self.nheads}/{self.nheads_k}"
        if self.window != (-1, -1):
            s += f" win{self.window}"
        if self.softcap:
            s += f" softcap{self.softcap}"
        return s + (" packed" if self.packed else "")


def cases_for(v: Variant, full: bool) -> list[Case]:
    cases = [Case(2, s, s, 4, 4) for s in (1, 17, 113, 1023)] + ([Case(1, 4097, 4097, 2, 2)] if full else [])
    cases += [Case(2, 113, 1023, 4, 4), Case(2, 1023, 113, 4, 4), Case(1, 17, 4097, 2, 2), Case(1, 1000, 1, 2, 2),
              Case(2, 1023, 1023, 16, 2), Case(2, 257, 385, 8, 1), Case(2, 300, 300, 4, 4, packed=True)]
    if v.features:
        cases += [Case(2, 1023, 1023, 4, 4, softcap=2.0), Case(2, 257, 385, 8, 1, window=(37, 0 if v.causal else 5))]
    return cases


def rand(shape, dt, gen):
    import torch

    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dt)


def run_ours(mod, v: Variant, path, q, k, vv, dout, out, lse, scale, window=(-1, -1), softcap=0.0, bufs=None):
    """One backward call through the extension; returns (dq, dk, dv summed over GQA groups, took_hopper)."""
    import torch

    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if bufs is None:
        rows = (sq + DQ_ACCUM_ROW_PAD - 1) // DQ_ACCUM_ROW_PAD * DQ_ACCUM_ROW_PAD
        bufs = dict(dsum=torch.full((b, h, sq), float("nan"), device="cuda", dtype=torch.float32),
                    dq_accum=torch.empty((b, h, rows, d), device="cuda", dtype=torch.float32),
                    dq=torch.full_like(q, float("nan")),
                    dk=torch.full((b, sk, h, d), float("nan"), device="cuda", dtype=q.dtype),
                    dv=torch.full((b, sk, h, d), float("nan"), device="cuda", dtype=q.dtype))
    took = mod.bwd(v.name, path, dout, q, k, vv, out, lse, bufs["dsum"], bufs["dq_accum"], bufs["dq"], bufs["dk"],
                   bufs["dv"], v.causal, scale, window[0], window[1], softcap)
    dk, dv = bufs["dk"], bufs["dv"]
    if h != hk:  # the binding's gqa_sum: fp32 sums over each group of query heads
        dk = dk.view(b, sk, hk, h // hk, d).float().sum(3).to(q.dtype)
        dv = dv.view(b, sk, hk, h // hk, d).float().sum(3).to(q.dtype)
    return bufs["dq"], dk, dv, took


def check_one(mod, v: Variant, c: Case, dt, path, gen, log) -> dict:
    import torch

    d = v.hdim
    if c.packed:
        qkv = rand((c.batch, c.seqlen_q, 3, c.nheads, d), dt, gen)
        q, k, vv = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = rand((c.batch, c.seqlen_q, c.nheads, d), dt, gen)
        k = rand((c.batch, c.seqlen_k, c.nheads_k, d), dt, gen)
        vv = rand((c.batch, c.seqlen_k, c.nheads_k, d), dt, gen)
    dout = rand((c.batch, c.seqlen_q, c.nheads, d), dt, gen)
    scale = 1.0 / math.sqrt(d)
    ref = grads_ref(q, k, vv, dout, v.causal, scale, c.window, c.softcap, True)
    low = grads_ref(q, k, vv, dout, v.causal, scale, c.window, c.softcap, False)
    out, lse = ref[0].to(dt).contiguous(), ref[1].contiguous()
    row = {"variant": v.name, "path": path, "shape": c.label()}
    try:
        dq, dk, dv, took = run_ours(mod, v, path, q, k, vv, dout, out, lse, scale, c.window, c.softcap)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reported as a failed row
        row.update(ok=False, error=str(e)[:300])
        log(f"ERROR {v.name} {path} {c.label()}: {e}")
        return row
    ok = True
    msg = []
    for name, ours, r, lo in (("dq", dq, ref[2], low[2]), ("dk", dk, ref[3], low[3]), ("dv", dv, ref[4], low[4])):
        err, tol = max_err(ours, r), 2 * max_err(lo, r) + 1e-5
        good = err <= tol  # NaN compares False
        ok = ok and good
        row[f"err_{name}"], row[f"tol_{name}"] = err, tol
        row[f"mismatch_pct_{name}"] = round(100.0 * float(((ours.float() - r).abs() > tol).float().mean()), 4)
        msg.append(f"{name} {err:.2e}/{tol:.2e}")
    if path == "routed":  # every call the harness makes takes the Hopper kernel, features or not
        ok = ok and took
    row.update(ok=bool(ok), took_hopper=bool(took))
    log(f"{'ok  ' if ok else 'FAIL'} {v.name:<16} {path:<6} {c.label():<34} " + " ".join(msg)
        + (f"  (hopper: {took})" if path == "routed" else ""))
    return row


def check(mod, variants: list[Variant], seed: int, full: bool, log, max_seqlen: int) -> list[dict]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows = []
    for v in variants:
        dt = torch.float16 if v.dtype == "fp16" else torch.bfloat16
        for c in cases_for(v, full):
            if max(c.seqlen_q, c.seqlen_k) > max_seqlen:
                continue
            features_on = c.softcap > 0 or c.window != (-1, -1)
            paths = ("routed",) if features_on else ("routed", "hopper") if c.seqlen_q in (17, 1023) else ("hopper",)
            if c.seqlen_k == 1:  # one key: the exact dK is 0, so the tolerance is the bare epsilon; the
                paths += ("ampere",)  # Ampere path's error there tells whether it is the formula's floor
            if v.sweep:
                paths = ("hopper",)
            for path in paths:
                rows.append(check_one(mod, v, c, dt, path, gen, log))
    return rows


# ------------------------------------------------------------------------------------------------
# Bench


def bench(mod, variants: list[Variant], seqlens: list[int], reps: int, log) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    tokens, model_dim = 16384, 2048
    built = {v.name for v in variants}
    for v in variants:
        if v.features:
            continue
        dt = torch.float16 if v.dtype == "fp16" else torch.bfloat16
        for s in seqlens:
            b, h, d = tokens // s, model_dim // v.hdim, v.hdim
            scale = 1.0 / math.sqrt(d)
            nsets = 3
            sets = []
            for _ in range(nsets):
                q, k, vv, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(4))
                out = torch.randn(b, s, h, d, device="cuda", dtype=dt)
                lse = torch.randn(b, h, s, device="cuda", dtype=torch.float32).abs() + 5.0
                rows_pad = (s + DQ_ACCUM_ROW_PAD - 1) // DQ_ACCUM_ROW_PAD * DQ_ACCUM_ROW_PAD
                bufs = dict(dsum=torch.empty(b, h, s, device="cuda", dtype=torch.float32),
                            dq_accum=torch.empty(b, h, rows_pad, d, device="cuda", dtype=torch.float32),
                            dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(vv))
                sets.append(dict(q=q, k=k, v=vv, dout=dout, out=out, lse=lse, bufs=bufs, sdpa={}))

            def ours(i, path):
                st = sets[i % nsets]
                run_ours(mod, v, path, st["q"], st["k"], st["v"], st["dout"], st["out"], st["lse"], scale, bufs=st["bufs"])

            def sdpa(i, backend):
                st = sets[i % nsets]
                if backend not in st["sdpa"]:  # one recorded forward per set and backend
                    qt, kt, vt = (st[n].transpose(1, 2).detach().requires_grad_(True) for n in ("q", "k", "v"))
                    with sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=v.causal, scale=scale)
                    st["sdpa"][backend] = (o, (qt, kt, vt), st["dout"].transpose(1, 2))
                o, leaves, do = st["sdpa"][backend]
                torch.autograd.grad(o, leaves, do, retain_graph=True)

            if v.sweep:  # against its default tile, in the same rounds
                default = Variant(v.hdim, v.dtype, v.causal, v.features)

                def base(i):
                    st = sets[i % nsets]
                    run_ours(mod, default, "routed", st["q"], st["k"], st["v"], st["dout"], st["out"], st["lse"], scale,
                             bufs=st["bufs"])

                backends = {"ours": lambda i: ours(i, "hopper")}
                if default.name in built:
                    backends["default"] = base
                backends["cudnn"] = lambda i: sdpa(i, SDPBackend.CUDNN_ATTENTION)
            else:
                backends = {"ours": lambda i: ours(i, "routed"), "ampere": lambda i: ours(i, "ampere"),
                            "flash": lambda i: sdpa(i, SDPBackend.FLASH_ATTENTION),
                            "cudnn": lambda i: sdpa(i, SDPBackend.CUDNN_ATTENTION)}
            ok = {}
            for n, fn in backends.items():  # warm-up (and recording); a backend that refuses shows n/a
                try:
                    for i in range(3 * nsets):
                        fn(i)
                    torch.cuda.synchronize()
                    ok[n] = True
                except Exception as e:  # noqa: BLE001
                    ok[n] = False
                    log(f"  {n} refused {v.name} s={s}: {str(e)[:160]}")
            events = {n: [] for n in backends}
            for r in range(reps):  # in turns: one call of each backend per round
                for n, fn in backends.items():
                    if not ok[n]:
                        continue
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn(r)
                    e1.record()
                    events[n].append((e0, e1))
            torch.cuda.synchronize()
            flops = 2.5 * 4 * b * h * s * s * d / (2 if v.causal else 1)
            row = {"variant": v.name, "hdim": v.hdim, "dtype": v.dtype, "causal": v.causal, "seqlen": s, "batch": b,
                   "nheads": h, "sweep": v.sweep.tag if v.sweep else None}
            for n, pairs in events.items():
                if pairs:
                    ms = statistics.median(e0.elapsed_time(e1) for e0, e1 in pairs)
                    row[f"{n}_ms"] = round(ms, 4)
                    row[f"{n}_tflops"] = round(flops / ms / 1e9, 1)
            rows.append(row)
            log(f"bench {v.name} s={s}: " + " ".join(f"{n}={row.get(n + '_tflops', 'n/a')}" for n in backends))
            del sets
            torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    out = ["| variant | seqlen | ours | ampere | flash | cudnn | default | ours/cudnn | ours/ampere | ours/default |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def f(n):
            return f"{r[n + '_tflops']:.1f}" if n + "_tflops" in r else "n/a"

        def ratio(a, b):
            return f"{r[a + '_tflops'] / r[b + '_tflops']:.2f}" if a + "_tflops" in r and b + "_tflops" in r else "n/a"

        out.append(f"| {r['variant']} | {r['seqlen']} | {f('ours')} | {f('ampere')} | {f('flash')} | {f('cudnn')} | "
                   f"{f('default')} | {ratio('ours', 'cudnn')} | {ratio('ours', 'ampere')} | {ratio('ours', 'default')} |")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["build", "check", "bench", "all", "compile"],
                    help="compile: the kernel TUs only (no torch, no GPU): the dev machine's compile check")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/hopper_bwd_out")))
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/hopper_bwd_build"))
    ap.add_argument("--cutlass", type=Path, default=Path(os.environ.get("CUTLASS_INCLUDE", "/tmp/cutlass/include")))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--variants", default="main,features,sweeps", help="comma list of groups: main, features, sweeps")
    ap.add_argument("--only", default="", help="comma list of variant names (subset)")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="checks without the 4097-row shape")
    ap.add_argument("--max-seqlen", type=int, default=1 << 30, help="checks: skip shapes longer than this")
    args = ap.parse_args()
    variants = [v for g in args.variants.split(",") for v in GROUPS[g]]
    if args.only:
        keep = set(args.only.split(","))
        variants = [v for v in variants if v.name in keep]
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / f"{args.what}.log", "a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    mod, info = build(variants, args.build_dir, args.cutlass, args.jobs, log, compile_only=args.what == "compile")
    log(f"build: kernels {info['kernels_wall_s']} s wall ({len(variants)} TUs, -j{args.jobs}), "
        f"binding+link {info.get('binding_link_s', '-')} s")
    for n, t in info["tus"].items():
        regs = "; ".join(f"{k['kernel']}: {k.get('regs')} regs, {k.get('spill', '')}" for k in t["ptxas"])
        log(f"  TU {n}: {t.get('wall_s')} s, peak RSS {t.get('peak_rss_mib')} MiB | {regs}")
    if args.what in ("build", "all", "compile"):
        (args.out / "build.json").write_text(json.dumps(info, indent=1))
    if args.what in ("build", "compile"):
        return 0
    status = 0
    if args.what in ("check", "all"):
        rows = check(mod, variants, args.seed, not args.quick, log, args.max_seqlen)
        (args.out / "check.json").write_text(json.dumps(rows, indent=1))
        bad = [r for r in rows if not r["ok"]]
        log(f"checks: {len(rows) - len(bad)} passed, {len(bad)} failed")
        status = 1 if bad else 0
    if args.what in ("bench", "all"):
        rows = bench(mod, variants, [int(s) for s in args.seqlens.split(",")], args.reps, log)
        (args.out / "bench.json").write_text(json.dumps(rows, indent=1))
        log(table(rows))
    return status


if __name__ == "__main__":
    sys.exit(main())
