"""Where does packing a GQA group's query heads into the rows of one block pay on the Hopper forward?

    python3 benchmarks/fwd_pack_gqa/measure.py [--json F]

A non-causal call with few queries (speculative decoding's verification, a short prefill chunk) gives
each (batch, query head) a query block with seqlen_q rows of the kernel's 128 (192 at hdim 64): mostly
padding. Packed, the g = nheads / nheads_k query heads that share a K/V head become g * seqlen_q rows of
one block, the same call as q (batch, seqlen_q * g, nheads_k, d) against k, v without GQA: the kernel
does the same visible work in fewer, fuller blocks. Timed here as that call plus the two copies (q into
the packed order, out and lse back), against the plain call, in turns (flashbuild.debug.bench.time_in_turns),
median of --reps after warm-up, on random inputs; the outputs of both are compared first.
Batch 4 (--batch), 32 query heads, 16k keys unless said; fp16.
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild
from flashbuild.debug.bench import time_in_turns


def pack(q, nheads_k):
    b, sq, h, d = q.shape
    g = h // nheads_k
    return q.view(b, sq, nheads_k, g, d).permute(0, 2, 1, 3, 4).reshape(b, nheads_k, sq * g, d).transpose(1, 2)


def unpack(out, lse, sq, g):
    b, rows, hk, d = out.shape
    o = out.transpose(1, 2).reshape(b, hk, sq, g, d).permute(0, 2, 1, 3, 4).reshape(b, sq, hk * g, d)
    lse = lse.view(b, hk, sq, g).permute(0, 1, 3, 2).reshape(b, hk * g, sq)
    return o, lse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="64,128")
    ap.add_argument("--seqlens-q", default="1,4,16,32,64,128,256")
    ap.add_argument("--seqlens-k", default="4096,16384")
    ap.add_argument("--groups", default="4,8")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--api-only", action="store_true",
                    help="time flash_attn_func alone (the binding's own choice), to compare two trees' builds "
                         "(the tried binding, which packed one-row calls itself, against main)")
    args = ap.parse_args()
    hdims = [int(x) for x in args.hdims.split(",")]
    m = flashbuild.load(hdim=hdims, dtype="fp16", arch="native", direction="fwd", causal="off", features=[])
    print(f"build {m.build_key()} on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    print(f"{'hdim':>4} {'g':>2} {'sk':>6} {'sq':>4} {'plain us':>9} {'packed us':>9} {'plain/packed':>12}")
    for hdim in hdims:
        for g in (int(x) for x in args.groups.split(",")):
            for sk in (int(x) for x in args.seqlens_k.split(",")):
                for sq in (int(x) for x in args.seqlens_q.split(",")):
                    b, h = args.batch, 32
                    hk = h // g
                    sets = [(torch.randn(b, sq, h, hdim, device="cuda", dtype=torch.float16),
                             torch.randn(b, sk, hk, hdim, device="cuda", dtype=torch.float16),
                             torch.randn(b, sk, hk, hdim, device="cuda", dtype=torch.float16)) for _ in range(2)]

                    def plain(i):
                        return m.flash_attn_func(*sets[i], return_lse=True)

                    def packed(i):
                        q, k, v = sets[i]
                        out, lse = m.flash_attn_func(pack(q, hk), k, v, return_lse=True)
                        return unpack(out, lse, sq, g)

                    o1, l1 = plain(0)
                    o2, l2 = packed(0)
                    err = (o1.float() - o2.float()).abs().max().item()
                    lerr = (l1 - l2).abs().max().item()
                    assert err < 2e-3 and lerr < 1e-3, (hdim, g, sk, sq, err, lerr)
                    runs = {"plain": plain, "packed": plain if args.api_only else packed}
                    for run in runs.values():
                        for i in range(4):
                            run(i % 2)
                    torch.cuda.synchronize()
                    ms = time_in_turns(runs, 2, args.reps)
                    r = dict(hdim=hdim, group=g, seqlen_k=sk, seqlen_q=sq, plain_us=ms["plain"] * 1e3,
                             packed_us=ms["packed"] * 1e3, max_abs_diff=err)
                    rows.append(r)
                    print(f"{hdim:>4} {g:>2} {sk:>6} {sq:>4} {r['plain_us']:>9.1f} {r['packed_us']:>9.1f} "
                          f"{r['plain_us'] / r['packed_us']:>12.2f}", flush=True)
    if args.json:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
