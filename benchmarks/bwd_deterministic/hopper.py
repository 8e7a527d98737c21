"""What deterministic=True costs the Hopper backward (sm90), beside SDPA's cuDNN and flash backends.

Usage (prints a markdown table; writes JSON when given a path):
    python3 benchmarks/bwd_deterministic/hopper.py [--hdims 64,96,128,192,256] [--seqlens 1024,4096,16384]
                                                   [--causal both] [--reps 15] [--json out.json]

flashbuild's own bench (flashbuild.debug.bench.measure: 16k tokens, model dim 2048, fp16, fresh random
inputs rotating past L2, every backend timed in turns, median of --reps CUDA-event timings after warm-up)
on one build of the backward without features (--features none: the Hopper backward's plain kernels hold
the mode; kernels/hopper/bwd_epilogue.h). Run from a tree before the Hopper mode with --features
local,softcap, the same table shows what deterministic calls cost there (the Ampere path's feature kernel). The deterministic calls are a peer of the build, `det`: the same
extension, its mha_bwd called with deterministic=True. After the timings, two deterministic calls of each
row's shape must give identical dq, dk, dv (`bits`).
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild
from flashbuild.debug import bench
from flashbuild.selection.variants import Variant


class Deterministic:
    """The build's extension with its backward called in deterministic mode: a peer for bench.measure."""

    def __init__(self, ext):
        self.ext = ext

    def variants(self):
        return self.ext.variants()

    def flash_attn_func(self, *args, **kwargs):
        return self.ext.flash_attn_func(*args, **kwargs)

    def mha_bwd(self, *args, **kwargs):
        return self.ext.mha_bwd(*args, deterministic=True, **kwargs)


def identical_bits(ext, variant: Variant, seqlen: int) -> bool:
    p = bench.problem(variant, seqlen)
    q, k, v, dout = (torch.randn(p.batch, p.seqlen, p.nheads, p.hdim, device="cuda", dtype=torch.float16)
                     for _ in range(4))
    out, lse = ext.flash_attn_func(q, k, v, causal=p.causal, return_lse=True)
    first, again = (ext.mha_bwd(dout, q, k, v, out, lse, causal=p.causal, deterministic=True) for _ in range(2))
    return all(torch.equal(a, b) for a, b in zip(first, again))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdims", default="64,96,128,192,256")
    parser.add_argument("--seqlens", default="1024,4096,16384")
    parser.add_argument("--causal", choices=["on", "off", "both"], default="both")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--features", default="none",
                        help="the build's features: none (the default), or local,softcap (a tree before the Hopper "
                             "mode sends deterministic calls to that feature kernel: the 'before' of a comparison)")
    parser.add_argument("--json")
    args = parser.parse_args()
    causals = {"on": [True], "off": [False], "both": [False, True]}[args.causal]
    features = [] if args.features == "none" else args.features.split(",")
    m = flashbuild.load(hdim=args.hdims, dtype="fp16", arch="sm90", direction="fwd,bwd", causal=args.causal,
                        features=features)
    ext = m.ext
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, build {m.build_key()}", flush=True)
    header = ("| hdim | causal | seqlen | default ms | det ms | det / default | det TFLOPS | cuDNN TFLOPS | "
              "det / cuDNN | default / cuDNN | bits |")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1), flush=True)
    rows = []
    for hdim in [int(h) for h in args.hdims.split(",")]:
        for causal in causals:
            variant = Variant("bwd", hdim, "fp16", causal, "sm90")
            for seqlen in [int(s) for s in args.seqlens.split(",")]:
                results = bench.measure(ext, variant, seqlen, reps=args.reps, has_fwd=True,
                                        backends=[bench.OURS, "sdpa-cudnn", "sdpa-flash"],
                                        peers={"det": Deterministic(ext)})
                by = {r.backend: r for r in results}
                ours, det, cudnn = by[bench.OURS], by["det"], by["sdpa-cudnn"]
                same = identical_bits(ext, variant, seqlen)
                row = dict(hdim=hdim, causal=causal, seqlen=seqlen, default_ms=ours.ms, det_ms=det.ms,
                           det_tflops=det.tflops, default_tflops=ours.tflops, cudnn_tflops=cudnn.tflops,
                           flash_tflops=by["sdpa-flash"].tflops, identical_bits=same)
                rows.append(row)

                def ratio(a, b):
                    return f"{a / b:.3f}" if a and b else "n/a"

                def num(x, digits):
                    return f"{x:.{digits}f}" if x else "n/a"

                print(f"| {hdim} | {'yes' if causal else 'no'} | {seqlen} | {num(ours.ms, 3)} | {num(det.ms, 3)} | "
                      f"{ratio(det.ms, ours.ms)} | {num(det.tflops, 1)} | {num(cudnn.tflops, 1)} | "
                      f"{ratio(det.tflops, cudnn.tflops)} | {ratio(ours.tflops, cudnn.tflops)} | "
                      f"{'identical' if same else 'DIFFER'} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, build=m.build_key(),
                           reps=args.reps, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
