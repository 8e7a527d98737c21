"""A few non-causal forward calls for run.sh's tools (ncu's launch statistics, compute-sanitizer): per head dim, a call
whose query blocks are even (clusters of two CTAs where the kernel takes them: kMulticastKV) then one whose are odd
(one CTA a box), fp16, each checked against the other setting's bits. --small: shapes a sanitizer runs in seconds.

    python3 benchmarks/fwd_kv_multicast/calls.py [--hdims 128,192,256] [--small]
"""
from __future__ import annotations

import sys

if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)

import argparse
import os

import torch

import flashbuild

ENV = "FLASHBUILD_HOPPER_FWD_KV_MULTICAST"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hdims", default="128,192,256")
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    m = flashbuild.load(hdim=args.hdims, dtype="fp16", arch="native", direction="fwd", causal="both", features=[])
    shapes = [(1, 256, 300, 4, 2), (1, 384, 300, 4, 2)] if args.small else [(2, 4096, 4096, 16, 16), (2, 3968, 4096, 16, 16)]
    for hdim in map(int, args.hdims.split(",")):
        for batch, seqlen_q, seqlen_k, heads, heads_k in shapes:
            torch.manual_seed(hdim)
            q = torch.randn(batch, seqlen_q, heads, hdim, device="cuda", dtype=torch.float16)
            k, v = (torch.randn(batch, seqlen_k, heads_k, hdim, device="cuda", dtype=torch.float16) for _ in range(2))
            outs = {}
            for setting in ("on", "off"):
                os.environ[ENV] = setting
                outs[setting] = m.flash_attn_func(q, k, v)
            torch.cuda.synchronize()
            same = torch.equal(outs["on"], outs["off"])
            print(f"hdim {hdim} q {seqlen_q} ({(seqlen_q + 127) // 128} query blocks) k {seqlen_k}: same bits {same}")
            if not same:
                sys.exit(f"hdim {hdim}: clusters and one CTA a box gave other bits")


if __name__ == "__main__":
    main()
