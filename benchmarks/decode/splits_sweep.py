"""How the split count moves a small decode call's GPU time: mha_fwd_kvcache with num_splits forced to each of
--splits (0 = the binding's choice), timed by the summed durations of the call's kernels (decode_bandwidth.py's
kernel_ms: CUPTI through torch.profiler), the counts in turns rep by rep, with the attention kernel's and the
combine kernel's shares of the binding's choice.

    python3 benchmarks/decode/splits_sweep.py [--hdim 64,128] [--batch 1,8] [--cache 4096,16384] [--splits 0,1,2,4,8,16,32]

The shapes are decode_bandwidth.py's (one query token, 32 query heads on 8 K/V heads, fp16, the whole cache
valid, every call reading the cache copy after the previous call's, past the L2); the kernels are the split-KV GPU
tests' build.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashbuild  # noqa: E402
from decode_bandwidth import HEADS, KV_HEADS, decode_inputs, ints, kernel_ms, median_ms  # noqa: E402


def kernel_shares(fn) -> dict[str, float]:
    """Each kernel's duration (us) in one call, by a short name."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            name = "combine" if "combine" in e.name else "append" if "append" in e.name else "attention"
            out[name] = out.get(name, 0.0) + e.time_range.elapsed_us()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdim", type=ints, default=[64, 128])
    parser.add_argument("--batch", type=ints, default=[1, 8])
    parser.add_argument("--cache", type=ints, default=[4096, 16384])
    parser.add_argument("--splits", type=ints, default=[0, 1, 2, 4, 8, 16, 32])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    ext = flashbuild.load(hdim="64,128", dtype="fp16", arch="native", direction="splitkv", causal="both").ext
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, build {ext.build_key()}")
    print("| hdim | batch | cache | " + " | ".join("auto" if s == 0 else f"{s} splits" for s in args.splits) +
          " | best / auto | auto: attention + combine (us) |")
    print("|" + " --- |" * (len(args.splits) + 5))
    for hdim in args.hdim:
        for batch in args.batch:
            for cache in args.cache:
                sets, copies, lens = decode_inputs(batch, cache, HEADS, KV_HEADS, hdim)
                reference = ext.mha_fwd_kvcache(*sets[0], lens, False, None, 0)[0].float()

                turn = itertools.count()  # every call reads the copy after the previous call's: none from L2

                def call(splits):
                    return lambda: ext.mha_fwd_kvcache(*sets[next(turn) % copies], lens, False, None, splits)
                for s in args.splits:  # every count computes the same output
                    diff = (ext.mha_fwd_kvcache(*sets[0], lens, False, None, s)[0].float() - reference).abs().max().item()
                    assert diff < 2e-3, (hdim, batch, cache, s, diff)
                times = median_ms(*[call(s) for s in args.splits], reps=args.reps, timer=kernel_ms)
                us = [t * 1e3 for t in times]
                shares = kernel_shares(call(0))
                parts = " + ".join(f"{shares.get(k, 0.0):.1f}" for k in ("attention", "combine"))
                print(f"| {hdim} | {batch} | {cache} | " + " | ".join(f"{u:.1f}" for u in us) +
                      f" | {min(us) / us[0]:.2f} | {parts} |", flush=True)
                del sets


if __name__ == "__main__":
    main()
