"""Would a Hopper split-KV pay for decoding? The work of one, timed on the Hopper forward as it is.

A split-KV call with one query token, H query heads on Hk K/V heads, splits S: each CTA takes the
G = H / Hk query heads of one K/V head as the rows of its query block (the binding packs them so) and
1/S of one batch row's keys. That is the Hopper forward (flash_attn_func) on
    q (B * S, G, Hk, d) against k, v = the cache viewed as (B * S, L / S, Hk, d)
(a view, no copy: the cache is (B, L, Hk, d) contiguous), which this script times beside
flash_attn_with_kvcache (the Ampere-path split-KV kernel compiled for sm_90a, its splits chosen by the
binding, its combine included) on the same cache, in turns; both through the extension's own functions
(flash_attn_func, mha_fwd_kvcache: no Python wrapper, whose host time would show in the small calls). The Hopper rows leave out what a split-KV
kernel adds: the combine of the S partial results (S * B * H * d fp32 values: 2 MB at S 16, B 8, H 32,
d 128, one small kernel) and fp32 partials instead of fp16 ones. So a Hopper row slower than the
split-KV row says the Hopper kernel as it is would not pay; a faster one bounds what it could give.

Usage (on an sm90 GPU; one flashbuild build, fwd + splitkv, hdim 64 and 128, fp16, not causal, no features):
    python3 benchmarks/decode/hopper_split_emulation.py [--json out.json] [--batch 1,8,64] [--cache 4096,16384,65536]
Medians of --reps CUDA-event timings after warm-up, the calls of a row in turns; the cache rotated past L2
as in decode_bandwidth.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

import flashbuild

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bandwidth import decode_inputs, ints, median_ms  # noqa: E402

SPLITS = (1, 2, 4, 8, 16, 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--batch", type=ints, default=[1, 8, 64])
    parser.add_argument("--cache", type=ints, default=[4096, 16384, 65536])
    parser.add_argument("--hdim", type=ints, default=[64, 128])
    parser.add_argument("--heads", default="32/8,32/32", help="query/K-V heads, comma-separated")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--nvcc-flag", action="append", default=[],
                        help="extra nvcc flag for the kernels (repeatable), e.g. -DFLASHBUILD_HOPPER_BLOCK_M=128 "
                             "with _BLOCK_N and _STAGES: another Hopper tile (hopper/fwd_traits.h, fwd_tile)")
    args = parser.parse_args()
    ext = flashbuild.load(hdim=args.hdim, dtype="fp16", arch="native", direction="fwd,splitkv", causal="off",
                          features="none", nvcc_flags=args.nvcc_flag).ext
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, build {ext.build_key()}")
    print("| hdim | heads | batch | cache | split-KV (us) | GB/s | Hopper, best S (us) | S | GB/s | "
          "Hopper / split-KV time |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for hdim in args.hdim:
        for heads in args.heads.split(","):
            nheads, nheads_k = (int(x) for x in heads.split("/"))
            group = nheads // nheads_k
            for batch in args.batch:
                for cache in args.cache:
                    if batch * cache > 64 * 65536:  # K + V under ~9 GB
                        continue
                    gb = 2 * batch * cache * nheads_k * hdim * 2 / 1e9
                    sets, copies, lens = decode_inputs(batch, cache, nheads, nheads_k, hdim)
                    turn = {"n": 0}

                    def next_set():
                        turn["n"] += 1
                        return sets[turn["n"] % copies]

                    def splitkv():
                        q, k, v = next_set()
                        return ext.mha_fwd_kvcache(q, k, v, lens, False, None, 0)

                    def hopper(splits):
                        # Query head kh * group + j -> row j of K/V head kh, once per split (made here, not timed).
                        packed = [q.view(batch, nheads_k, group, hdim).transpose(1, 2).repeat_interleave(splits, dim=0)
                                  .contiguous() for q, _, _ in sets]
                        views = [(k.view(batch * splits, cache // splits, nheads_k, hdim),
                                  v.view(batch * splits, cache // splits, nheads_k, hdim)) for _, k, v in sets]

                        def call():
                            turn["n"] += 1
                            i = turn["n"] % copies
                            return ext.flash_attn_func(packed[i], *views[i], False)
                        return call

                    usable = [s for s in SPLITS if cache % s == 0 and cache // s >= 128]
                    times = median_ms(splitkv, *[hopper(s) for s in usable], reps=args.reps)
                    t_split, t_hopper = times[0], times[1:]
                    best = min(range(len(usable)), key=lambda i: t_hopper[i])
                    row = {"hdim": hdim, "heads": heads, "batch": batch, "cache": cache, "splitkv_us": t_split * 1e3,
                           "hopper_us": {str(s): t * 1e3 for s, t in zip(usable, t_hopper)},
                           "hopper_best_splits": usable[best], "hopper_best_us": t_hopper[best] * 1e3,
                           "cache_copies": copies}
                    rows.append(row)
                    print(f"| {hdim} | {heads} | {batch} | {cache} | {t_split * 1e3:.1f} | {gb / t_split * 1e3:.0f} | "
                          f"{t_hopper[best] * 1e3:.1f} | {usable[best]} | {gb / t_hopper[best] * 1e3:.0f} | "
                          f"{t_hopper[best] / t_split:.2f} |", flush=True)
                    del sets
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
