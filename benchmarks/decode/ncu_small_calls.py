"""The small decoding calls for Nsight Compute: batch 1 and 8 with 4k keys (GQA 32:8, fp16, head dims 128 and 64),
ours (the default path) and SDPA's cuDNN backend, each call on fresh random tensors, between
torch.cuda.profiler.start() and stop(), so `ncu --profile-from-start off` profiles these kernels and nothing of
the warm-up. ncu replays each kernel with its caches flushed (its default --cache-control all), so the cache
comes from HBM as in the timed table (decode_table.py).

Usage (as benchmarks/decode/small_calls_run.sh runs it):
    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \\
        python3 benchmarks/decode/ncu_small_calls.py [--hdim 128,64] [--batch 1,8] [--cache 4096] [--build-hdims 64,128]
                                                     [--splits 0,4]

--splits profiles ours once per forced num_splits (0: the default's choice), in that order, before cuDNN's call.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashbuild

HEADS, KV_HEADS = 32, 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hdim", default="128,64", help="head dims, comma-separated")
    parser.add_argument("--batch", default="1,8", help="batch sizes, comma-separated")
    parser.add_argument("--cache", default="4096", help="cache lengths (keys), comma-separated")
    parser.add_argument("--build-hdims", help="head dims of the build to load (default: --hdim's)")
    parser.add_argument("--splits", default="0", help="forced num_splits of ours' calls, comma-separated (0: auto)")
    args = parser.parse_args()
    splits = [int(x) for x in args.splits.split(",") if x]
    hdims = [int(x) for x in args.hdim.split(",")]
    build_hdims = args.build_hdims or ",".join(map(str, sorted(hdims)))
    m = flashbuild.load(hdim=build_hdims, dtype="fp16", arch="native", direction="splitkv", causal="off", features=[])
    calls = []
    batches, caches = [int(x) for x in args.batch.split(",")], [int(x) for x in args.cache.split(",")]
    shapes = [(d, b, n) for d in hdims for b in batches for n in caches]
    for d, b, n in shapes:
        q = torch.randn(b, 1, HEADS, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, n, KV_HEADS, d, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        lens = torch.full((b,), n, dtype=torch.int32, device="cuda")

        def ours(splits, q=q, k=k, v=v, lens=lens):
            m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=splits)

        def cudnn(q=q, k=k, v=v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               enable_gqa=True)
        calls += [lambda s=s, ours=ours: ours(s) for s in splits] + [cudnn]
    for call in calls:  # warm-up: module load, cuDNN's plan
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
