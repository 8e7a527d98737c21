"""One backward call of ours or of FA3 (hopper/ through the flash-attn-3 profile, with its cluster switch) for Nsight
Compute: a warm-up call, then the call ncu profiles (run.sh: --launch-skip 1 --launch-count 1 on the main kernel's
name). Issue 46's shape: 16k tokens (batch 16384 / seqlen), model dim 2048 (heads 2048 / hdim), fp16, causal or not.
--direction fwd: forward calls instead, on forward-only builds (ours of both causal modes; ../fwd_l2_ncu/run.sh).

    python3 benchmarks/bwd_ncu_fa3/drive.py --who ours|fa3 --hdim 64 [--seqlen 4096] [--causal] [--tree DIR]
                                            [--build-hdims 64,128] [--direction bwd|fwd]
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild
from flashbuild.debug import adapters
from flashbuild.pipeline import builder


def fa3(tree: str, hdims: str, direction: str = "fwd,bwd", features: str = "cluster"):
    """FA3's slice behind the adapter the bench uses (flashbuild bench --peer-source TREE --peer-profile flash-attn-3);
    features "none": without the cluster kernels (../fwd_clock_power/probe.py's control)."""
    kwargs = dict(source=tree, profile="flash-attn-3", hdim=hdims, dtype="fp16", arch="native", direction=direction,
                  features=features)
    package = flashbuild.load(**kwargs)
    selection, options = builder.parse_request(**builder.check_api_keywords(kwargs), keywords=True)
    plan = builder.make_plan(selection, options)
    return adapters.wrap("flash-attn-3", package, json.loads(plan.manifest_path.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--who", choices=["ours", "fa3"], required=True)
    parser.add_argument("--hdim", type=int, required=True)
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--tree", default="/tmp/fa3/flash-attention-0251105a", help="FA3's tree (--who fa3)")
    parser.add_argument("--build-hdims", help="head dims of the build to load (default: --hdim)")
    parser.add_argument("--direction", choices=["bwd", "fwd"], default="bwd", help="the calls profiled")
    args = parser.parse_args()
    hdims = args.build_hdims or str(args.hdim)
    fwd = args.direction == "fwd"
    if args.who == "fa3":
        ext = fa3(args.tree, hdims, "fwd" if fwd else "fwd,bwd")
    elif fwd:
        ext = flashbuild.load(hdim=hdims, dtype="fp16", arch="native", direction="fwd", causal="both", features=[])
    else:
        ext = flashbuild.load(hdim=hdims, dtype="fp16", arch="native", direction="fwd,bwd",
                              causal="on" if args.causal else "off", features=[])
    torch.manual_seed(0)
    shape = (16384 // args.seqlen, args.seqlen, 2048 // args.hdim, args.hdim)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(4))
    if fwd:
        for _ in range(2):  # the warm-up, then the profiled call
            ext.flash_attn_func(q, k, v, causal=args.causal)
    else:
        out, lse = ext.flash_attn_func(q, k, v, causal=args.causal, return_lse=True)
        for _ in range(2):
            ext.mha_bwd(dout, q, k, v, out, lse, causal=args.causal)
    torch.cuda.synchronize()
    print(f"{args.who} hdim {args.hdim} seqlen {args.seqlen} causal {args.causal}: two {args.direction} calls done")


if __name__ == "__main__":
    main()
