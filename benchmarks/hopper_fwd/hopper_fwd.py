"""Dev harness for the Hopper forward family (kernels/hopper/), standalone from the flashbuild package.

On a machine with an sm90 GPU, nvcc, ninja and a CUDA build of torch:

    python3 benchmarks/hopper_fwd/hopper_fwd.py all --out DIR [--jobs 16] [--cutlass INCLUDE_DIR]

1. build: one TU per variant (the instantiation flashbuild generates, plus three plain wrappers:
   run_fwd as the binding calls it, the Hopper kernel alone, the Ampere-path kernel alone: a baseline
   only, compiled for sm_90a here though no flashbuild plan builds it for sm90), compiled
   by ninja with flashbuild's nvcc flags for sm_90a; per-TU wall time and peak RSS recorded; a small
   torch extension (binding.cpp, generated) links them.
2. check: every variant against an fp32 reference on fresh random inputs, outputs poisoned with NaN:
   odd seqlens, seqlen_q != seqlen_k (causal aligned bottom-right), GQA 8:1, MQA, Q/K/V sliced from
   one packed QKV tensor, and for feature variants local windows and softcap; out and lse. A check
   passes when max|ours - ref| <= 2 * max|torch in fp16/bf16 - ref| + 1e-5; NaN never passes.
   Also: run_fwd's routing (dense calls take the Hopper kernel; a varlen call runs on the Ampere path).
3. bench: TFLOPS at 16k tokens per batch, model dim 2048 (nheads = 2048 / hdim), seqlen 1k/4k/16k,
   causal and not, fp16 and bf16, beside the Ampere path and PyTorch SDPA's flash and cuDNN backends:
   CUDA events, warm-up, backends timed in turns (one call of each per round), the median of --reps
   rounds, inputs rotated over several sets past L2. FLOPs = 4 * b * h * s^2 * d, halved when causal.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
NVCC_FLAGS = ["-std=c++17", "-O3", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-DNDEBUG",
              "-gencode", "arch=compute_90a,code=sm_90a", "-Xptxas", "-v"]
LOCAL, SOFTCAP = 1, 2  # common/params.h Feature bits


@dataclass(frozen=True)
class Sweep:
    """A tuning variant: FwdTraits<hdim, block_m, block_n, stages, pingpong> launched directly."""
    block_m: int
    block_n: int
    stages: int
    pingpong: bool = True
    extended_shapes: bool = False  # CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED: wgmma N = any multiple of 8
    ostore: str = "Auto"  # hopper::OStore: Auto, Tma, Direct

    @property
    def tag(self) -> str:
        o = "" if self.ostore == "Auto" else f"o{self.ostore.lower()}"
        return f"m{self.block_m}n{self.block_n}s{self.stages}{'pp' if self.pingpong else 'nopp'}{o}"


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
    def cpp_dtype(self) -> str:
        return "flashbuild::DType::kFp16" if self.dtype == "fp16" else "flashbuild::DType::kBf16"


MAIN = [Variant(h, d, c) for h in (64, 128, 256) for d in ("fp16", "bf16") for c in (False, True)]
EXTRA = [Variant(h, d, c) for h in (96, 192) for d in ("fp16", "bf16") for c in (False, True)]
FEATURES = [Variant(128, "fp16", c, LOCAL | SOFTCAP) for c in (False, True)]
BASE = [Variant(h, "fp16", c) for h in (64, 128, 256) for c in (False, True)]  # the defaults the sweeps compare with
SWEEPS = [Variant(128, "fp16", False, 0, Sweep(128, 128, 2, False)),  # hdim 128 without ping-pong
          Variant(64, "fp16", False, 0, Sweep(192, 128, 4))]          # hdim 64 with three consumer warpgroups
SWEEPS2 = [Variant(64, "fp16", False, 0, Sweep(128, 192, 4)),
           Variant(64, "fp16", False, 0, Sweep(192, 128, 4, False)),
           Variant(64, "fp16", True, 0, Sweep(192, 128, 4)),
           Variant(128, "fp16", False, 0, Sweep(128, 176, 2, True, True)),
           Variant(128, "fp16", True, 0, Sweep(128, 128, 2, False)),
           Variant(256, "fp16", False, 0, Sweep(128, 80, 2, True, True)),
           Variant(256, "fp16", True, 0, Sweep(128, 64, 2, False))]
# O out of registers (OStore::kDirect) against the TMA store through sQ's buffer, and the third
# stage the freed O buffer makes room for at hdim 128.
SWEEPS3 = [Variant(256, "fp16", False, 0, Sweep(128, 64, 2, ostore="Tma")),
           Variant(256, "fp16", True, 0, Sweep(128, 64, 2, ostore="Tma")),
           Variant(192, "fp16", True, 0, Sweep(128, 96, 2, ostore="Tma")),
           Variant(128, "fp16", False, 0, Sweep(128, 128, 2, ostore="Direct")),
           Variant(128, "fp16", True, 0, Sweep(128, 128, 2, ostore="Direct")),
           Variant(128, "fp16", False, 0, Sweep(128, 128, 3, ostore="Direct")),
           Variant(128, "fp16", True, 0, Sweep(128, 128, 3, ostore="Direct")),
           Variant(64, "fp16", True, 0, Sweep(128, 128, 4, ostore="Direct"))]
# The sweep claims again, each timed in turns with its default tile and cuDNN (sets 1-3 timed a
# sweep alone, back to back, which reads low), with the defaults they compare with.
SWEEPS4 = [Variant(64, "fp16", False, 0, Sweep(192, 128, 4)),
           Variant(64, "fp16", False, 0, Sweep(128, 192, 4)),
           Variant(128, "fp16", True, 0, Sweep(128, 128, 2, False)),
           Variant(128, "fp16", False, 0, Sweep(128, 128, 2, ostore="Direct")),
           Variant(256, "fp16", True, 0, Sweep(128, 64, 2, ostore="Direct")),
           Variant(256, "fp16", True, 0, Sweep(128, 64, 2, False))]
BASE4 = [Variant(64, "fp16", False), Variant(128, "fp16", True), Variant(128, "fp16", False), Variant(256, "fp16", True)]


def tu_text(v: Variant) -> str:
    head = f"// Generated by benchmarks/hopper_fwd/hopper_fwd.py for {v.name}. Do not edit.\n"
    args = f"90, {v.hdim}, {v.cpp_dtype}, {'true' if v.causal else 'false'}, {v.features}"
    if v.sweep:
        w = v.sweep
        elem = "cutlass::half_t" if v.dtype == "fp16" else "cutlass::bfloat16_t"
        ext = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED\n" if w.extended_shapes else ""
        return head + ext + f"""#include "hopper/fwd_launch.h"
#include "hopper/fwd_kernel.h"  // the kernel, compiled here with its launch (FwdKernelEntry, fwd_params.h)
namespace fbdev {{
void hopper_{v.name}(const flashbuild::FwdParams& p, cudaStream_t s) {{
  using Traits = flashbuild::hopper::FwdTraits<{v.hdim}, {w.block_m}, {w.block_n}, {w.stages}, {'true' if w.pingpong else 'false'}, {elem},
                                               flashbuild::hopper::OStore::k{w.ostore}>;
  flashbuild::hopper::launch_fwd<Traits, {'true' if v.causal else 'false'}, {v.features}>(p, s);
}}
}}  // namespace fbdev
"""
    return head + f"""#include "hopper/fwd_launch.h"
#include "hopper/fwd_kernel.h"  // the kernel, compiled here with its launch (FwdKernelEntry, fwd_params.h)
#include "ampere/fwd_path.h"  // the Ampere-path forward: the harness calls it (ampere_*), in this TU
template void flashbuild::run_fwd<{args}>(const flashbuild::FwdParams&, cudaStream_t);
namespace fbdev {{
void routed_{v.name}(const flashbuild::FwdParams& p, cudaStream_t s) {{ flashbuild::run_fwd<{args}>(p, s); }}
void hopper_{v.name}(const flashbuild::FwdParams& p, cudaStream_t s) {{
  flashbuild::hopper::run_fwd_sm90<{v.hdim}, {v.cpp_dtype}, {'true' if v.causal else 'false'}, {v.features}>(p, s);
}}
void ampere_{v.name}(const flashbuild::FwdParams& p, cudaStream_t s) {{ flashbuild::ampere::run_fwd_path<{args}>(p, s); }}
bool can_run_{v.name}(const flashbuild::FwdParams& p) {{ return flashbuild::hopper::can_run(p, {v.hdim}, 2); }}
}}  // namespace fbdev
"""


BINDING = r"""// Generated by benchmarks/hopper_fwd/hopper_fwd.py. Do not edit.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstring>
#include "common/params.h"

using flashbuild::FwdParams;
using Fn = void (*)(const FwdParams&, cudaStream_t);
using CanFn = bool (*)(const FwdParams&);
namespace fbdev {
%DECLS%
}  // namespace fbdev

namespace {
struct Entry { const char* name; int features; Fn routed; Fn hopper; Fn ampere; CanFn can_run; };
const Entry kEntries[] = {
%ENTRIES%
};

const Entry& find(const std::string& name) {
  for (const Entry& e : kEntries) if (name == e.name) return e;
  TORCH_CHECK(false, "hopper_fwd_dev: no variant ", name);
}

struct Strides { int64_t batch, row, head; };
Strides strides_of(const at::Tensor& t) {
  if (t.dim() == 4) return {t.stride(0), t.stride(1), t.stride(2)};
  return {0, t.stride(0), t.stride(1)};
}
}  // namespace

// Fills FwdParams as kernels/binding/flash_api.cpp does and calls one entry; returns whether the
// call took (or, for "routed", would take) the Hopper kernel.
bool fwd(const std::string& name, const std::string& path, const at::Tensor& q, const at::Tensor& k,
         const at::Tensor& v, at::Tensor& out, at::Tensor& lse, bool causal, double softmax_scale,
         int64_t window_left, int64_t window_right, double softcap, const c10::optional<at::Tensor>& cu_seqlens_q,
         const c10::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
         const c10::optional<at::Tensor>& seqused_k) {
  const Entry& e = find(name);
  c10::cuda::CUDAGuard guard(q.device());
  const bool varlen = cu_seqlens_q.has_value();
  FwdParams p{};
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v), so = strides_of(out);
  p.q_batch_stride = sq.batch, p.q_row_stride = sq.row, p.q_head_stride = sq.head;
  p.k_batch_stride = sk.batch, p.k_row_stride = sk.row, p.k_head_stride = sk.head;
  p.v_batch_stride = sv.batch, p.v_row_stride = sv.row, p.v_head_stride = sv.head;
  p.o_batch_stride = so.batch, p.o_row_stride = so.row, p.o_head_stride = so.head;
  p.lse_batch_stride = lse.dim() == 3 ? lse.stride(0) : 0;
  p.lse_head_stride = lse.dim() == 3 ? lse.stride(1) : lse.stride(0);
  if (varlen) {
    p.cu_seqlens_q = cu_seqlens_q->data_ptr<int>();
    p.cu_seqlens_k = cu_seqlens_k->data_ptr<int>();
    p.batch = cu_seqlens_q->size(0) - 1, p.seqlen_q = max_seqlen_q, p.seqlen_k = max_seqlen_k;
  } else {
    p.batch = q.size(0), p.seqlen_q = q.size(1), p.seqlen_k = k.size(1);
  }
  if (seqused_k.has_value()) p.seqused_k = seqused_k->data_ptr<int>();
  p.nheads = q.size(-2), p.nheads_k = k.size(-2), p.head_dim = q.size(-1);
  p.softmax_scale = softmax_scale;
  p.softmax_scale_log2 = softmax_scale * 1.4426950408889634;
  p.num_splits = 1;
  // As the binding: an unbounded window side bounds nothing; a causal call's right side is 0.
  const int64_t unbounded = int64_t(p.seqlen_q) + p.seqlen_k;
  p.window_left = window_left < 0 ? unbounded : window_left;
  p.window_right = causal ? 0 : (window_right < 0 ? unbounded : window_right);
  p.softcap = softcap;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (path == "routed") {
    TORCH_CHECK(e.routed, name, " has no routed entry");
    e.routed(p, stream);
    return e.can_run ? e.can_run(p) : true;
  }
  if (path == "hopper") { e.hopper(p, stream); return true; }
  TORCH_CHECK(path == "ampere" && e.ampere, name, " has no ", path, " entry");
  e.ampere(p, stream);
  return false;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fwd", &fwd);
  m.def("variants", [] {
    std::vector<std::string> names;
    for (const Entry& e : kEntries) names.push_back(e.name);
    return names;
  });
}
"""


def binding_text(variants: list[Variant]) -> str:
    decls, entries = [], []
    for v in variants:
        n = v.name
        decls.append(f"void hopper_{n}(const FwdParams&, cudaStream_t);")
        if v.sweep:
            entries.append(f'  {{"{n}", {v.features}, fbdev::hopper_{n}, fbdev::hopper_{n}, nullptr, nullptr}},')
        else:
            decls += [f"void routed_{n}(const FwdParams&, cudaStream_t);", f"void ampere_{n}(const FwdParams&, cudaStream_t);",
                      f"bool can_run_{n}(const FwdParams&);"]
            entries.append(f'  {{"{n}", {v.features}, fbdev::routed_{n}, fbdev::hopper_{n}, fbdev::ampere_{n}, '
                           f"fbdev::can_run_{n}}},")
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


def build(variants: list[Variant], build_dir: Path, cutlass: Path, jobs: int, log) -> tuple[object, dict]:
    import torch.utils.cpp_extension as ext

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
        tus[v.name]["ptxas"] = ptxas_summary((build_dir / f"{v.name}.o.log").read_text()) if (build_dir / f"{v.name}.o.log").exists() else []
    failed = [n for n, t in tus.items() if t.get("rc") != 0]
    if rc != 0 or failed:
        for n in failed:
            log(f"FAILED {n}:\n" + (build_dir / f"{n}.o.log").read_text()[-3000:])
        raise SystemExit(f"kernel build failed: {failed}")
    write_if_different(build_dir / "binding.cpp", binding_text(variants))
    t1 = time.time()
    ext_dir = build_dir / "ext"  # torch writes its own build.ninja there
    ext_dir.mkdir(exist_ok=True)
    mod = ext.load(name="hopper_fwd_dev", sources=[str(build_dir / "binding.cpp")],
                   extra_include_paths=[str(KERNELS)], extra_cflags=["-O2"],
                   extra_ldflags=[str(build_dir / f"{v.name}.o") for v in variants], with_cuda=True,
                   build_directory=str(ext_dir), verbose=False)
    return mod, {"kernels_wall_s": round(kernels_s, 1), "binding_link_s": round(time.time() - t1, 1), "tus": tus}


def ptxas_summary(text: str) -> list[dict]:
    """Registers / spills / smem of each hopper kernel in a TU's ptxas -v output."""
    out, cur = [], None
    for line in text.splitlines():
        if "Compiling entry function" in line:
            name = line.split("'")[1]
            cur = {"kernel": "hopper" if "6hopper" in name else "ampere", "mangled": name[:120]}
            out.append(cur)
        elif cur is not None and "spill stores" in line:
            cur["spill"] = line.strip()
        elif cur is not None and "Used" in line and "registers" in line:
            cur["regs"] = line.split("Used")[1].split("registers")[0].strip()
    return out


# ------------------------------------------------------------------------------------------------
# Reference (flash-attn semantics; the same as flashbuild/reference.py, kept here so the harness
# stands alone while that package is being refactored)


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


def max_err(x, ref):
    """max |x - ref|, where equal infinities count 0 and NaN counts NaN."""
    import torch

    x, ref = x.float(), ref.float()
    if torch.isnan(x).any():
        return float("nan")
    same_inf = torch.isinf(x) & torch.isinf(ref) & (x == ref)
    diff = torch.where(same_inf, torch.zeros_like(x), (x - ref).abs())
    return float(diff.max()) if diff.numel() else 0.0


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
    cases = [Case(2, s, s, 4, 4) for s in (1, 17, 113, 1023, 4097 if full else 1023)]
    cases += [Case(2, 113, 1023, 4, 4), Case(2, 1023, 113, 4, 4), Case(1, 17, 4097, 2, 2),
              Case(2, 1023, 1023, 16, 2), Case(2, 257, 385, 8, 1), Case(2, 300, 300, 4, 4, packed=True)]
    if v.features & LOCAL:
        wins = [(37, 0), (0, 0)] if v.causal else [(64, 32), (-1, 5), (37, -1), (0, 0)]
        cases += [Case(2, 1023, 1023, 4, 4, window=w) for w in wins] + [Case(2, 113, 1023, 4, 4, window=wins[0])]
    if v.features & SOFTCAP:
        cases += [Case(2, 1023, 1023, 4, 4, softcap=2.0), Case(2, 257, 385, 8, 1, softcap=2.0)]
        if v.features & LOCAL:
            cases += [Case(2, 1023, 1023, 4, 4, window=(64, 32) if not v.causal else (37, 0), softcap=2.0)]
    return cases


def check(mod, variants: list[Variant], seed: int, full: bool, log, max_seqlen: int = 1 << 30) -> list[dict]:
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
            for path in (("routed", "hopper") if not v.sweep else ("hopper",)):
                if path == "routed" and c.seqlen_q not in (17, 1023):
                    continue  # routing is checked on a few shapes; the kernel on all
                rows.append(check_one(mod, v, c, dt, path, gen, log))
        if not v.sweep and max_seqlen >= 1023:
            rows.append(check_varlen(mod, v, dt, gen, log))
            for sq in (1023, 113):
                rows.append(check_seqused(mod, v, dt, sq, gen, log))
    return rows


def rand(shape, dt, gen):
    import torch

    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dt)


def check_one(mod, v, c: Case, dt, path, gen, log) -> dict:
    import torch

    d = v.hdim
    if c.packed:
        qkv = rand((c.batch, c.seqlen_q, 3, c.nheads, d), dt, gen)
        q, k, vv = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    else:
        q = rand((c.batch, c.seqlen_q, c.nheads, d), dt, gen)
        k = rand((c.batch, c.seqlen_k, c.nheads_k, d), dt, gen)
        vv = rand((c.batch, c.seqlen_k, c.nheads_k, d), dt, gen)
    scale = 1.0 / math.sqrt(d)
    out = torch.full((c.batch, c.seqlen_q, c.nheads, d), float("nan"), device="cuda", dtype=dt)
    lse = torch.full((c.batch, c.nheads, c.seqlen_q), float("nan"), device="cuda", dtype=torch.float32)
    row = {"variant": v.name, "path": path, "shape": c.label()}
    try:
        took = mod.fwd(v.name, path, q, k, vv, out, lse, v.causal, scale, c.window[0], c.window[1], c.softcap,
                       None, None, 0, 0, None)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reported as a failed row
        row.update(ok=False, error=str(e)[:300])
        log(f"ERROR {v.name} {path} {c.label()}: {e}")
        return row
    ref_o, ref_l = attention_ref(q, k, vv, v.causal, scale, c.window, c.softcap)
    low_o, low_l = attention_ref(q, k, vv, v.causal, scale, c.window, c.softcap, upcast=False)
    eo, el = max_err(out, ref_o), max_err(lse, ref_l)
    to, tl = 2 * max_err(low_o, ref_o) + 1e-5, 2 * max_err(low_l, ref_l) + 1e-5
    ok = (eo <= to) and (el <= tl)  # NaN compares False
    if path == "routed":
        ok = ok and took  # a dense call of a served head dim must take the Hopper kernel
    row.update(ok=bool(ok), took_hopper=bool(took), err_out=eo, tol_out=to, err_lse=el, tol_lse=tl,
               mismatch_pct=round(100.0 * float(((out.float() - ref_o).abs() > to).float().mean()), 4))
    log(f"{'ok  ' if ok else 'FAIL'} {v.name:<28} {path:<6} {c.label():<40} out {eo:.2e}/{to:.2e} lse {el:.2e}/{tl:.2e}"
        + ("" if took or path != "routed" else "  (the Hopper launcher refused it!)"))
    return row


def check_varlen(mod, v, dt, gen, log) -> dict:
    """A packed varlen call through run_fwd: served by the Ampere path, checked per sequence."""
    import torch

    lens_q, lens_k = [17, 113, 300], [40, 113, 250]
    h, hk, d = 4, 2, v.hdim
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    q, k, vv = rand((sum(lens_q), h, d), dt, gen), rand((sum(lens_k), hk, d), dt, gen), rand((sum(lens_k), hk, d), dt, gen)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((h, sum(lens_q)), float("nan"), device="cuda", dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    wl, wr, sc = (37, -1, 2.0) if v.features else (-1, -1, 0.0)
    if v.features and v.causal:
        wr = 0
    took = mod.fwd(v.name, "routed", q, k, vv, out, lse, v.causal, scale, wl, wr, sc, cu_q, cu_k, max(lens_q), max(lens_k),
                   None)
    torch.cuda.synchronize()
    ok, worst = took, 0.0  # packed calls run on the Hopper kernel (there is no other in an sm90 TU)
    for i in range(3):
        qs, ks = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        args = (q[qs][None], k[ks][None], vv[ks][None], v.causal, scale, (wl, wr), sc)
        ro, rl = attention_ref(*args)
        lo, ll = attention_ref(*args, upcast=False)
        eo, el = max_err(out[qs][None], ro), max_err(lse[:, qs][None], rl)
        ok = ok and eo <= 2 * max_err(lo, ro) + 1e-5 and el <= 2 * max_err(ll, rl) + 1e-5
        worst = max(worst, eo) if eo == eo else float("nan")
    log(f"{'ok  ' if ok else 'FAIL'} {v.name:<28} varlen (the Hopper kernel took it: {took}) max out err {worst:.2e}")
    return {"variant": v.name, "path": "routed-varlen", "shape": "varlen 17/40,113/113,300/250 h4/2",
            "ok": bool(ok), "took_hopper": bool(took), "err_out": worst}


def check_seqused(mod, v, dt, seqlen_q, gen, log) -> dict:
    """A dense call with per-batch key counts (seqused_k): run_fwd on the Hopper kernel, checked per batch."""
    import torch

    used = [700, 1, 1023, 333]
    b, sk, h, hk, d = len(used), 1023, 4, 2, v.hdim
    q, k, vv = rand((b, seqlen_q, h, d), dt, gen), rand((b, sk, hk, d), dt, gen), rand((b, sk, hk, d), dt, gen)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, h, seqlen_q), float("nan"), device="cuda", dtype=torch.float32)
    seqused = torch.tensor(used, dtype=torch.int32, device="cuda")
    scale = 1.0 / math.sqrt(d)
    wl, wr, sc = ((37, -1, 2.0) if not v.causal else (37, 0, 2.0)) if v.features else (-1, -1, 0.0)
    took = mod.fwd(v.name, "routed", q, k, vv, out, lse, v.causal, scale, wl, wr, sc, None, None, 0, 0, seqused)
    torch.cuda.synchronize()
    ok, worst = bool(took), 0.0
    for i, u in enumerate(used):
        args = (q[i:i + 1], k[i:i + 1, :u], vv[i:i + 1, :u], v.causal, scale, (wl, wr), sc)
        ro, rl = attention_ref(*args)
        lo, ll = attention_ref(*args, upcast=False)
        eo, el = max_err(out[i:i + 1], ro), max_err(lse[i:i + 1], rl)
        ok = ok and eo <= 2 * max_err(lo, ro) + 1e-5 and el <= 2 * max_err(ll, rl) + 1e-5
        worst = max(worst, eo) if eo == eo else float("nan")
    label = f"seqused_k {used} sq{seqlen_q} sk{sk} h{h}/{hk}"
    log(f"{'ok  ' if ok else 'FAIL'} {v.name:<28} {label} (Hopper: {bool(took)}) max out err {worst:.2e}")
    return {"variant": v.name, "path": "routed-seqused", "shape": label, "ok": bool(ok), "took_hopper": bool(took),
            "err_out": worst}


# ------------------------------------------------------------------------------------------------
# Bench


def bench(mod, variants: list[Variant], seqlens: list[int], reps: int, log) -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    rows = []
    tokens, model_dim = 16384, 2048
    built = {v.name for v in variants}
    for v in variants:
        if v.features:
            continue
        dt = torch.float16 if v.dtype == "fp16" else torch.bfloat16
        for s in seqlens:
            b, h, d = tokens // s, model_dim // v.hdim, v.hdim
            nsets = 3  # q+k+v of one set is >= 192 MB at 16k tokens: three sets rotate well past the 60 MB L2
            sets = []
            for _ in range(nsets):
                q, k, vv = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
                out = torch.empty_like(q)
                lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                sets.append((q, k, vv, out, lse))
            scale = 1.0 / math.sqrt(d)

            def ours(i, path):
                q, k, vv, out, lse = sets[i % nsets]
                mod.fwd(v.name, path, q, k, vv, out, lse, v.causal, scale, -1, -1, 0.0, None, None, 0, 0, None)

            def sdpa(i, backend):
                q, k, vv, _, _ = sets[i % nsets]
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), vv.transpose(1, 2),
                                                   is_causal=v.causal, scale=scale)

            def base(i):  # a sweep's default tile, timed in the same rounds
                q, k, vv, out, lse = sets[i % nsets]
                mod.fwd(default_name, "routed", q, k, vv, out, lse, v.causal, scale, -1, -1, 0.0, None, None, 0, 0, None)

            backends = {"ours": lambda i: ours(i, "routed" if not v.sweep else "hopper")}
            default_name = Variant(v.hdim, v.dtype, v.causal, v.features).name
            if not v.sweep:
                backends["ampere"] = lambda i: ours(i, "ampere")
                backends["flash"] = lambda i: sdpa(i, SDPBackend.FLASH_ATTENTION)
            elif default_name in built:
                backends["default"] = base
            backends["cudnn"] = lambda i: sdpa(i, SDPBackend.CUDNN_ATTENTION)
            times = {n: [] for n in backends}
            ok = {}
            for n, fn in backends.items():  # warm-up; a backend that refuses the shape shows n/a
                try:
                    for i in range(3):
                        fn(i)
                    torch.cuda.synchronize()
                    ok[n] = True
                except Exception as e:  # noqa: BLE001
                    ok[n] = False
                    log(f"  {n} refused {v.name} s={s}: {str(e)[:120]}")
            # In turns: one call of each backend per round, so that a drift of the clocks weighs on all
            # alike. Nothing synchronises inside the loop: the host stays ahead of the GPU, and each
            # event pair measures GPU time only.
            events = {n: [] for n in backends}
            for r in range(reps):
                for n, fn in backends.items():
                    if not ok[n]:
                        continue
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn(r + 3)
                    e1.record()
                    events[n].append((e0, e1))
            torch.cuda.synchronize()
            for n, pairs in events.items():
                times[n] = [e0.elapsed_time(e1) for e0, e1 in pairs]
            flops = 4 * b * h * s * s * d / (2 if v.causal else 1)
            row = {"variant": v.name, "hdim": v.hdim, "dtype": v.dtype, "causal": v.causal, "seqlen": s, "batch": b,
                   "nheads": h, "sweep": v.sweep.tag if v.sweep else None}
            for n in backends:
                if times[n]:
                    ms = statistics.median(times[n])
                    row[f"{n}_ms"] = round(ms, 4)
                    row[f"{n}_tflops"] = round(flops / ms / 1e9, 1)
            rows.append(row)
            log(f"bench {v.name} s={s}: " + " ".join(f"{n}={row.get(n + '_tflops', 'n/a')}" for n in backends))
            del sets
            torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    out = ["| variant | seqlen | ours | ampere | flash | cudnn | default | ours/cudnn | ours/flash | ours/default |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def f(n):
            return f"{r[n + '_tflops']:.1f}" if n + "_tflops" in r else "n/a"

        def ratio(a, b):
            return f"{r[a + '_tflops'] / r[b + '_tflops']:.2f}" if a + "_tflops" in r and b + "_tflops" in r else "n/a"

        out.append(f"| {r['variant']} | {r['seqlen']} | {f('ours')} | {f('ampere')} | {f('flash')} | {f('cudnn')} | "
                   f"{f('default')} | {ratio('ours', 'cudnn')} | {ratio('ours', 'flash')} | {ratio('ours', 'default')} |")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["build", "check", "bench", "all"])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/hopper_fwd_out")))
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/hopper_fwd_build"))
    ap.add_argument("--cutlass", type=Path, default=Path(os.environ.get("CUTLASS_INCLUDE", "/tmp/cutlass/include")))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--variants", default="main,features,sweeps",
                    help="comma list of groups: main, extra (hdim 96/192), features, base, sweeps, sweeps2")
    ap.add_argument("--only", default="", help="comma list of variant names (subset)")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="checks without the 4097-row shapes")
    ap.add_argument("--max-seqlen", type=int, default=1 << 30, help="checks: skip shapes longer than this")
    args = ap.parse_args()
    groups = {"main": MAIN, "extra": EXTRA, "features": FEATURES, "base": BASE, "sweeps": SWEEPS, "sweeps2": SWEEPS2,
              "sweeps3": SWEEPS3, "sweeps4": SWEEPS4, "base4": BASE4}
    variants = [v for g in args.variants.split(",") for v in groups[g]]
    if args.only:
        keep = set(args.only.split(","))
        variants = [v for v in variants if v.name in keep]
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / f"{args.what}.log", "a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    mod, build_info = build(variants, args.build_dir, args.cutlass, args.jobs, log)
    log(f"build: kernels {build_info['kernels_wall_s']} s wall ({len(variants)} TUs, -j{args.jobs}), "
        f"binding+link {build_info['binding_link_s']} s")
    for n, t in build_info["tus"].items():
        regs = "; ".join(f"{k['kernel']}: {k.get('regs')} regs, {k.get('spill', '')}" for k in t["ptxas"])
        log(f"  TU {n}: {t.get('wall_s')} s, peak RSS {t.get('peak_rss_mib')} MiB | {regs}")
    if args.what in ("build", "all"):  # the later phases reload what is built (0 s): keep the build's numbers
        (args.out / "build.json").write_text(json.dumps(build_info, indent=1))
    if args.what == "build":
        return 0
    status = 0
    if args.what in ("check", "all"):
        rows = check(mod, variants, args.seed, not args.quick, log, args.max_seqlen)
        (args.out / "check.json").write_text(json.dumps(rows, indent=1))
        bad = [r for r in rows if not r["ok"]]
        log(f"checks: {len(rows) - len(bad)} passed, {len(bad)} failed")
        status = 1 if bad else 0
    if args.what in ("bench", "all"):
        seqlens = [int(s) for s in args.seqlens.split(",")]
        rows = bench(mod, variants, seqlens, args.reps, log)
        (args.out / "bench.json").write_text(json.dumps(rows, indent=1))
        log(table(rows))
    return status


if __name__ == "__main__":
    sys.exit(main())
