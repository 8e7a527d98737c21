"""Split-KV decode bandwidth on the GPU: K/V bytes read per second by mha_fwd_kvcache.

Usage (prints a markdown table; writes JSON when given a path):
    python3 benchmarks/decode_bandwidth.py [--json out.json]

One query token per sequence (seqlen_q = 1), 32 query heads sharing 8 K/V heads, head dim 128, fp16, the
whole cache valid (cache_seqlens = cache length). Bytes = K + V of the cache, read once. Median of 50
CUDA-event timings after 5 warm-ups, the raw extension call (no Python wrapper). `auto` lets the binding
choose the number of splits; `1 split` forces none, to show what splitting buys.
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild

HEADS, KV_HEADS, HDIM = 32, 8, 128


def median_ms(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    ext = flashbuild.load(hdim=HDIM, dtype="fp16", arch="native", direction="splitkv", causal="off").ext
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, build {ext.build_key()}")
    print("| batch | cache | time (us) | GB/s auto | GB/s 1 split |\n| --- | --- | --- | --- | --- |")
    for batch in (1, 8, 64):
        for cache in (4096, 16384, 65536, 131072):
            if batch * cache > 64 * 65536:  # keep K + V under ~9 GB
                continue
            q = torch.randn(batch, 1, HEADS, HDIM, device="cuda", dtype=torch.float16)
            k = torch.randn(batch, cache, KV_HEADS, HDIM, device="cuda", dtype=torch.float16)
            v = torch.randn_like(k)
            lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
            gb = 2 * batch * cache * KV_HEADS * HDIM * 2 / 1e9
            auto = median_ms(lambda: ext.mha_fwd_kvcache(q, k, v, lens, False, None, 0))
            single = median_ms(lambda: ext.mha_fwd_kvcache(q, k, v, lens, False, None, 1))
            row = {"batch": batch, "cache": cache, "us": auto * 1e3, "gbps": gb / auto * 1e3,
                   "gbps_one_split": gb / single * 1e3}
            rows.append(row)
            print(f"| {batch} | {cache} | {row['us']:.1f} | {row['gbps']:.0f} | {row['gbps_one_split']:.0f} |", flush=True)
            del k, v
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
