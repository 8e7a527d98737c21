"""Packed (varlen) forward calls against dense ones of the same work, on one build, in turns.

    python3 benchmarks/hopper_varlen/varlen_bench.py --hdims 64,128 [--time-hdims 64] [--json F]
    python3 benchmarks/hopper_varlen/varlen_bench.py --direction bwd --hdims 64,128,256   # the backward

With --direction bwd the calls are the raw backward (mha_bwd / mha_varlen_bwd) on random out and an
LSE of log(L) per row (values that keep P finite; only the time is read), the build is the bwd slice,
the kernel columns are the kernels named *bwd_kernel*, TFLOPS count 2.5x the forward's FLOPs, and the
SDPA columns are left out (SDPA has no backward-only call).

Per head dim and causal setting, with 16k tokens and 2048 model dims (hdim x nheads):
  dense      flash_attn_func on (16k / L, L, h, d) for L = 1k and 4k;
  packed     flash_attn_varlen_func on the same tokens, every sequence L long (the same work: a
             packed call should cost what the dense one does);
  mixed      flash_attn_varlen_func on 16k tokens in sequences of random lengths 128..4k (seed 0),
             TFLOPS counted over each sequence's visible (query, key) pairs;
  sdpa-flash / sdpa-cudnn  PyTorch's SDPA backends on the dense shape (the usual yardsticks).
Median of --reps calls between CUDA events, after warm-up, the runs taking turns
(flashbuild.debug.bench.time_in_turns); inputs random normal, fresh per call set. A packed call also
checks its offsets on the host (the binding's check_offsets: a device-to-host copy, so a sync, per
cu_seqlens tensor), which the call time includes; "kernel" columns are the attention kernel's own
time (torch.profiler, the mean over --reps calls of the kernels named *fwd_kernel*), for packed and
dense alike. The build is flashbuild's default cache entry for the selection (built here if missing).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random

import torch

import flashbuild
from flashbuild.debug.bench import time_in_turns, visible_pairs
from torch.profiler import ProfilerActivity, profile

TOKENS = 16384
MODEL_DIM = 2048


def tflops(pairs: int, nheads: int, hdim: int, ms: float, direction: str = "fwd") -> float:
    return (4 if direction == "fwd" else 10) * pairs * nheads * hdim / (ms * 1e-3) / 1e12


def kernel_ms(run, n_sets: int, reps: int, kernel: str = "fwd_kernel") -> float:
    """Mean ms per call of the kernels named *<kernel>* (flashbuild's, either family)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(reps):
            run(i % n_sets)
        torch.cuda.synchronize()
    us = sum(e.device_time for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and kernel in e.name)
    return us / reps / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="64,128", help="the build's head dims")
    ap.add_argument("--time-hdims", help="the head dims to time (default: all of --hdims)")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--direction", default="fwd", choices=["fwd", "bwd"])
    ap.add_argument("--json")
    args = ap.parse_args()
    bwd = args.direction == "bwd"
    hdims = [int(h) for h in args.hdims.split(",")]
    timed = [int(h) for h in (args.time_hdims or args.hdims).split(",")]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    m = flashbuild.load(hdim=hdims, dtype=args.dtype, arch="native", direction=args.direction, causal="both", features=[])
    print(f"build {m.build_key()} on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for hdim, causal in itertools.product(timed, (False, True)):
        nheads = MODEL_DIM // hdim
        rng = random.Random(0)
        mixed = []
        while sum(mixed) < TOKENS:
            mixed.append(min(rng.randint(128, 4096), TOKENS - sum(mixed)))
        for label, lens in [("L=1k", [1024] * (TOKENS // 1024)), ("L=4k", [4096] * (TOKENS // 4096)),
                            (f"mixed ({len(mixed)} seqs)", mixed)]:
            cu = torch.tensor([0, *itertools.accumulate(lens)], device="cuda", dtype=torch.int32)
            # fwd: q, k, v; bwd: dout, q, k, v, out (and the LSE below)
            sets = [[torch.randn(TOKENS, nheads, hdim, device="cuda", dtype=dtype) for _ in range(5 if bwd else 3)]
                    for _ in range(3)]
            lse = torch.cat([torch.full((nheads, n), math.log(n), device="cuda") for n in lens], dim=1)
            if bwd:
                runs = {"packed": lambda i: m.mha_varlen_bwd(*sets[i], lse, cu, cu, max(lens), max(lens), causal=causal)}
            else:
                runs = {"packed": lambda i: m.flash_attn_varlen_func(*sets[i], cu, cu, max(lens), max(lens), causal=causal)}
            if len(set(lens)) == 1:
                L = lens[0]
                dense = [[t.view(TOKENS // L, L, nheads, hdim) for t in s] for s in sets]
                if bwd:
                    lse_dense = lse.view(nheads, TOKENS // L, L).transpose(0, 1).contiguous()
                    runs["dense"] = lambda i: m.mha_bwd(*dense[i], lse_dense, causal=causal)
                else:
                    runs["dense"] = lambda i: m.flash_attn_func(*dense[i], causal=causal)
                sdpa = [[t.transpose(1, 2) for t in s] for s in dense]
                from torch.nn.attention import SDPBackend, sdpa_kernel
                for name, backend in () if bwd else (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                                     ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def run(i, backend=backend):
                        with sdpa_kernel(backend):
                            return torch.nn.functional.scaled_dot_product_attention(*sdpa[i], is_causal=causal)
                    runs[name] = run
            for run in runs.values():  # warm-up
                for i in range(3):
                    run(i)
            torch.cuda.synchronize()
            ms = time_in_turns(runs, 3, args.reps)
            for name in ("packed", "dense"):
                if name in runs:
                    ms[f"{name} (kernel)"] = kernel_ms(runs[name], 3, args.reps, f"{args.direction}_kernel")
            pairs = sum(visible_pairs(L, L, causal, (-1, -1)) for L in lens)
            row = {"hdim": hdim, "causal": causal, "lens": label,
                   **{name: round(tflops(pairs, nheads, hdim, t, args.direction), 1) for name, t in ms.items()}}
            rows.append(row)
            print(json.dumps(row))
    names = ["dense", "packed", "dense (kernel)", "packed (kernel)", "sdpa-flash", "sdpa-cudnn"]
    print("\nTFLOPS; ratios of the kernels' own times (packed / dense) and of packed's kernel to cuDNN's call")
    print("| hdim | causal | sequences | " + " | ".join(names) + " | packed / dense (kernels) | packed kernel / cuDNN |")
    print("| --- | --- | --- |" + " ---: |" * (len(names) + 2))
    for r in rows:
        cells = [str(r.get(n, "")) for n in names]
        ratio = f"{r['packed (kernel)'] / r['dense (kernel)']:.2f}" if "dense" in r else ""
        vs_cudnn = f"{r['packed (kernel)'] / r['sdpa-cudnn']:.2f}" if "sdpa-cudnn" in r else ""
        print(f"| {r['hdim']} | {'yes' if r['causal'] else 'no'} | {r['lens']} | " + " | ".join(cells) +
              f" | {ratio} | {vs_cudnn} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "direction": args.direction, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
