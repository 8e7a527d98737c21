"""Where an eager decoding call's host time goes: calls back to back on one small cache (batch 1, 4k keys, GQA 32:8,
fp16), timed with the host clock over many calls, so each number is the host's time per call (the GPU's kernel is
shorter than it and keeps up). Rows: the public API (flash_attn_with_kvcache) as the default launches it eagerly
(plainly) and as a programmatic dependent launch (FLASHBUILD_SPLITKV_PATH=pdl-early), the binding alone through
_fwd_kvcache_raw (the fwd_kvcache op's body, keyword arguments; the API's plain path passes them by position), each also
with its TMA descriptors built for the call (FLASHBUILD_SPLITKV_PATH=fresh-descriptors; by default a launch reuses an
earlier call's, hopper/splitkv_descriptors.h), the API with the host work it had before both of issue 45's host changes
(`main-host`: fresh descriptors and the full argument checks, not _plain_decode), SDPA's flash and cuDNN backends on the
same tensors, and the allocations a call made before decode_host_allocs/ (four torch.empty; two tensors and one
allocator block since); and the time of one cudaGetDriverEntryPointByVersion lookup (CuTe looks up
cuTensorMapEncodeTiled that way for each TMA descriptor it builds on the host: four per Hopper split-KV launch).
`binding, no index tensor` passes cache_seqlens=None (the same keys: no checked copy, no check kernel): the index
check's host cost is the difference. --flashinfer adds FlashInfer's decode (`run()` after one `plan()`, as a server's
layers share a step's plan; and `plan() + run()`), 16-token pages of the same cache (decode_table.py's columns).
--profile DIR writes torch.profiler's table of host operations (self CPU time: the aten operations and CUDA runtime
calls a call makes, the binding's included) for 300 calls of the API, and of FlashInfer's run() with --flashinfer.

Usage:
    python3 benchmarks/decode/host_overhead.py [--hdim 128] [--build-hdims 64,128] [--calls 3000] [--rounds 5]
                                               [--flashinfer] [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashbuild  # noqa: E402
from decode_table import flashinfer_decode  # noqa: E402
from flashbuild import api  # noqa: E402
from flashbuild.api import _fwd_kvcache_raw  # noqa: E402

HEADS, KV_HEADS, CACHE = 32, 8, 4096


def per_call_us(fn, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def entry_point_lookup_us(calls: int) -> float:
    """cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", 12000) through the process's libcudart."""
    for name in ("libcudart.so.13", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return float("nan")
    fn = rt.cudaGetDriverEntryPointByVersion
    pfn, status = ctypes.c_void_p(), ctypes.c_int()
    symbol = b"cuTensorMapEncodeTiled"
    start = time.perf_counter()
    for _ in range(calls):
        fn(symbol, ctypes.byref(pfn), ctypes.c_uint(12000), ctypes.c_ulonglong(0), ctypes.byref(status))
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hdim", type=int, default=128, help="head dim")
    parser.add_argument("--build-hdims", default="64,128",
                        help="head dims of the build to load (decode_table.py's build: no new build)")
    parser.add_argument("--calls", type=int, default=3000, help="calls per timed loop")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of all rows in turns (median)")
    parser.add_argument("--flashinfer", action="store_true", help="add FlashInfer's decode rows (if it imports)")
    parser.add_argument("--profile", help="write torch.profiler's host tables here (a folder)")
    args = parser.parse_args()
    m = flashbuild.load(hdim=args.build_hdims, dtype="fp16", arch="native", direction="splitkv", causal="off",
                        features=[])
    d = args.hdim
    q = torch.randn(1, 1, HEADS, d, device="cuda", dtype=torch.float16)
    k = torch.randn(1, CACHE, KV_HEADS, d, device="cuda", dtype=torch.float16)
    v = torch.randn_like(k)
    lens = torch.full((1,), CACHE, dtype=torch.int32, device="cuda")
    scale = d ** -0.5
    qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
        return call

    @contextlib.contextmanager
    def path(value):
        os.environ["FLASHBUILD_SPLITKV_PATH"] = value
        try:
            yield
        finally:
            del os.environ["FLASHBUILD_SPLITKV_PATH"]

    def api_on(value):
        def call():
            with path(value):
                m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
        return call

    def api_main_host():
        # the host work before the kept TMA descriptors and _plain_decode (decode_table.py's `main-host` column)
        api._DECODE_FAST_PATH = False
        try:
            with path("fresh-descriptors"):
                m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
        finally:
            api._DECODE_FAST_PATH = True

    def binding_on(value):
        def call():
            with path(value):
                _fwd_kvcache_raw(m.ext, q, k, v, None, None, None, None, lens, None, None, None, False, scale, True, 0,
                                 -1, -1, 0.0)
        return call

    rows = {
        "api": lambda: m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens),
        "api, pdl-early": api_on("pdl-early"),
        "api, no-pdl": api_on("no-pdl"),
        "api, main-host (fresh descriptors, full checks)": api_main_host,
        "api, fresh-descriptors": api_on("fresh-descriptors"),
        "binding": lambda: _fwd_kvcache_raw(m.ext, q, k, v, None, None, None, None, lens, None, None, None, False,
                                            scale, True, 0, -1, -1, 0.0),
        "binding, fresh-descriptors": binding_on("fresh-descriptors"),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "binding, no index tensor": lambda: _fwd_kvcache_raw(m.ext, q, k, v, None, None, None, None, None, None, None,
                                                             None, False, scale, True, 0, -1, -1, 0.0),
        "empty4": lambda: [torch.empty(1, 1, HEADS, d, device="cuda", dtype=torch.float16) for _ in range(4)],
    }
    if args.flashinfer:
        rows.update(flashinfer_rows(q, k, v))
    for fn in rows.values():  # warm-up: module load, handles, allocator
        for _ in range(50):
            fn()
    times = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(per_call_us(fn, args.calls))
    lookup = entry_point_lookup_us(100000)
    print(f"host time per call, batch 1, {CACHE} keys, hdim {d}; median of {args.rounds} rounds of {args.calls} calls")
    print("| row | µs per call | rounds |")
    print("| --- | --- | --- |")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} |")
    print(f"| cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled) | {lookup:.2f} | |")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        for name in ("api", "flashinfer run"):
            if name in rows:
                profile_host(rows[name], os.path.join(args.profile, f"host-{name.replace(' ', '-')}.txt"))


def flashinfer_rows(q, k, v) -> dict:
    """FlashInfer's decode of the same call (16-token pages of the same cache, decode_table.py's flashinfer_decode):
    run() after one plan(), and both."""
    try:
        import flashinfer
    except Exception as e:  # no rows, and why
        print(f"FlashInfer does not import, no FlashInfer rows: {type(e).__name__}: {e}")
        return {}
    plan, run, paged = flashinfer_decode(flashinfer, q, CACHE, 16)
    cache = paged(k, v)
    return {"flashinfer run": lambda: run(cache), "flashinfer plan + run": lambda: (plan(), run(cache))}


def profile_host(fn, path: str, calls: int = 300) -> None:
    """torch.profiler's host table of `calls` calls of fn (self CPU time per operation and runtime call)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with open(path, "w") as f:
        f.write(f"{calls} calls\n")
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


if __name__ == "__main__":
    main()
