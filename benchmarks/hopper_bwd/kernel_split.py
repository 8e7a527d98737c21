"""Where a dense sm90 backward call's GPU time goes, kernel by kernel: the main (wgmma) kernel against
the passes around it (dq_accum's zeroing, dot(dO, O), the dQ conversion, and whatever else the call
launches), at 16k tokens, model dim 2048, fp16.

    python3 benchmarks/hopper_bwd/kernel_split.py [--hdims 64,128] [--seqlens 1024,4096,16384] [--reps 20]
                                                  [--build-hdims 64,128,256 --build-dtypes fp16,bf16]

Each row: 5 warm-up calls, then --reps calls under torch.profiler (CUDA activity); a kernel's time is
its device time summed over the calls / reps. `main` is the kernel with the largest share; `others`
lists the rest by name (shortened). The share of the others is what a fused or removed pass could win
at that seqlen (it grows as the main kernel shrinks: the passes are O(tokens), the main kernel O(s^2)).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import flashbuild

TOKENS, MODEL_DIM = 16384, 2048


def short(name: str) -> str:
    name = re.sub(r"<.*", "", name)  # template arguments
    name = re.sub(r"\(.*", "", name)
    return name.split("::")[-1][:48]


def split_of(fn, reps: int) -> dict[str, float]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    us = defaultdict(float)
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            us[evt.name] += evt.device_time / reps
    return dict(us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdims", default="64,128")
    parser.add_argument("--seqlens", default="1024,4096,16384")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--build-hdims", help="the build's head dims (default --hdims): reuse a wider build")
    parser.add_argument("--build-dtypes", default="fp16", help="the build's dtypes (the rows are fp16)")
    args = parser.parse_args()
    # Forward (for out and lse) and backward, no features: the plain kernels a dense call runs.
    m = flashbuild.load(hdim=args.build_hdims or args.hdims, dtype=args.build_dtypes, arch="native",
                        direction="fwd,bwd", causal="both", features=[])
    print(f"# device {torch.cuda.get_device_name()}, torch {torch.__version__}, build {m.build_key()}")
    print("| hdim | causal | seqlen | all (us) | main (us) | main share | others (us each) |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for hdim in (int(h) for h in args.hdims.split(",")):
        for causal in (False, True):
            for seqlen in (int(s) for s in args.seqlens.split(",")):
                batch, nheads = TOKENS // seqlen, MODEL_DIM // hdim
                q, k, v, dout = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.float16)
                                 for _ in range(4))
                out, lse = m.ext.flash_attn_func(q, k, v, causal=causal, return_lse=True)
                us = split_of(lambda: m.ext.mha_bwd(dout, q, k, v, out, lse, causal=causal), args.reps)
                total = sum(us.values())
                main_name = max(us, key=us.get)
                others = ", ".join(f"{short(n)} {t:.1f}" for n, t in sorted(us.items(), key=lambda x: -x[1])
                                   if n != main_name)
                print(f"| {hdim} | {'yes' if causal else 'no'} | {seqlen} | {total:.1f} | {us[main_name]:.1f} | "
                      f"{us[main_name] / total:.3f} | {others} |", flush=True)


if __name__ == "__main__":
    main()
