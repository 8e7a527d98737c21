"""Chunked prefill against a KV cache: where would a Hopper split-KV kernel pay? (issue 18)

    python3 benchmarks/decode/prefill_kvcache.py [--json F]

On sm90 flash_attn_with_kvcache runs the Ampere-path split-KV kernel (compiled for sm_90a); flash_attn_func
on the same q and cache tensors runs the Hopper forward. A chunk of seqlen_q new queries (batch 4, 32 query
heads on 8 K/V heads, head dim 128, fp16) attends to a full cache of 16k keys, causal (bottom-right: the
chunk is the cache's last seqlen_q positions) and not; SDPA's cuDNN backend times the non-causal rows as
the usual yardstick. seqlen_q = 1 is decode (bandwidth-bound: ../decode/README.md). Median of --reps calls
between CUDA events after warm-up, the runs in turns (flashbuild.debug.bench.time_in_turns). TFLOPS count
the visible (query, key) pairs.
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild
from flashbuild.debug.bench import time_in_turns, visible_pairs

BATCH, HEADS, KV_HEADS, HDIM, CACHE = 4, 32, 8, 128, 16384


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlens-q", default="1,128,1024,4096")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--paged", type=int, default=0,
                    help="page size: the cache calls read a paged copy of the cache (pages shuffled), once as the "
                         "binding routes it and once with num_splits=1 (the split-KV kernel)")
    ap.add_argument("--build-hdims", default=str(HDIM), help="the build's head dims (to share another build's cache)")
    args = ap.parse_args()
    m = flashbuild.load(hdim=args.build_hdims, dtype="fp16", arch="native", direction="fwd,splitkv", causal="both",
                        features=[])
    print(f"build {m.build_key()} on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for seqlen_q in (int(s) for s in args.seqlens_q.split(",")):
        for causal in (False, True):
            sets = [(torch.randn(BATCH, seqlen_q, HEADS, HDIM, device="cuda", dtype=torch.float16),
                     torch.randn(BATCH, CACHE, KV_HEADS, HDIM, device="cuda", dtype=torch.float16),
                     torch.randn(BATCH, CACHE, KV_HEADS, HDIM, device="cuda", dtype=torch.float16)) for _ in range(2)]
            lens = torch.full((BATCH,), CACHE, device="cuda", dtype=torch.int32)
            runs = {
                "kvcache (split-KV)": lambda i: m.flash_attn_with_kvcache(*sets[i], cache_seqlens=lens, causal=causal),
                "flash_attn_func (Hopper)": lambda i: m.flash_attn_func(*sets[i], causal=causal),
            }
            if args.paged:
                per_row = CACHE // args.paged
                table = torch.randperm(BATCH * per_row, device="cuda").int().view(BATCH, per_row)
                paged = [(q, k.reshape(BATCH * per_row, args.paged, KV_HEADS, HDIM)[table.flatten().argsort()],
                          v.reshape(BATCH * per_row, args.paged, KV_HEADS, HDIM)[table.flatten().argsort()])
                         for q, k, v in sets]
                runs = {
                    "kvcache paged": lambda i: m.flash_attn_with_kvcache(*paged[i], cache_seqlens=lens,
                                                                         block_table=table, causal=causal),
                    "kvcache paged, num_splits=1": lambda i: m.flash_attn_with_kvcache(
                        *paged[i], cache_seqlens=lens, block_table=table, causal=causal, num_splits=1),
                    "flash_attn_func (Hopper)": runs["flash_attn_func (Hopper)"],
                }
                for i in range(2):  # the paged copy holds the same keys: same output as the dense call
                    a, b = runs["kvcache paged"](i), runs["flash_attn_func (Hopper)"](i)
                    assert torch.equal(a, b) or (a.float() - b.float()).abs().max().item() < 1e-2
            if not causal:
                sdpa = [(q.transpose(1, 2), k.repeat_interleave(HEADS // KV_HEADS, 2).transpose(1, 2),
                         v.repeat_interleave(HEADS // KV_HEADS, 2).transpose(1, 2)) for q, k, v in sets]

                def cudnn(i):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return torch.nn.functional.scaled_dot_product_attention(*sdpa[i])
                runs["sdpa-cudnn"] = cudnn
            for run in runs.values():
                for i in range(4):
                    run(i % 2)
            torch.cuda.synchronize()
            ms = time_in_turns(runs, 2, args.reps)
            flops = 4 * BATCH * HEADS * HDIM * visible_pairs(seqlen_q, CACHE, causal, (-1, -1))
            row = {"seqlen_q": seqlen_q, "causal": causal,
                   **{name: {"ms": round(t, 4), "tflops": round(flops / (t * 1e-3) / 1e12, 1)} for name, t in ms.items()}}
            rows.append(row)
            print(json.dumps(row))
    first = "kvcache paged" if args.paged else "kvcache (split-KV)"
    names = [first, *(["kvcache paged, num_splits=1"] if args.paged else []), "flash_attn_func (Hopper)", "sdpa-cudnn"]
    print(f"\nTFLOPS (ms); cache 16k{f' in pages of {args.paged}' if args.paged else ''}, batch 4, 32/8 heads, "
          "hdim 128, fp16")
    print("| seqlen_q | causal | " + " | ".join(names) + f" | {first} / Hopper |")
    print("| --- | --- |" + " ---: |" * (len(names) + 1))
    for r in rows:
        cells = [f"{r[n]['tflops']} ({r[n]['ms']})" if n in r else "" for n in names]
        ratio = r[first]["tflops"] / r["flash_attn_func (Hopper)"]["tflops"]
        print(f"| {r['seqlen_q']} | {'yes' if r['causal'] else 'no'} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
