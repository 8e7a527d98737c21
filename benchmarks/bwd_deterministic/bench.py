"""What deterministic=True costs the backward on the GPU: the raw mha_bwd timed with and without it.

Usage (prints a markdown table; writes JSON when given a path):
    python3 benchmarks/bwd_deterministic/bench.py [--hdims 64,128] [--seqlens 1024,2048,4096,8192,16384]
                                                  [--causal both] [--arch native] [--reps 20]
                                                  [--json out.json]

16k tokens per batch (batch = 16384 / seqlen), model dim 2048 (nheads = 2048 / hdim), fp16, the forward's
own out and lse. Bwd FLOPs = 2.5 x 4 b h s^2 d, halved when causal (benchmarks/README.md). Median of --reps
CUDA-event timings after 5 warm-ups of each call, the calls of a row timed in turns rep by rep, each
rep on the other of two input sets (each tensor is 64 MB at 16k tokens: past the 50 MB L2 either way).

The build holds local and softcap: the mode is compiled into that feature kernel alone, which the binding
sends deterministic calls to (on sm90 it holds the Ampere-path backward). A dense default call runs the
Hopper backward on sm90, a varlen one the plain Ampere-path kernel, so the mode's cost on the Ampere path
is measured through varlen calls: the same tokens as equal-length sequences through mha_varlen_bwd, with
and without the mode (the feature kernel's own overhead included).
Columns (ms): `hopper` dense default; `ampere` varlen default; `ampere det` varlen deterministic;
`dense det` dense deterministic (what flash_attn_func(deterministic=True) runs). Ratios: `det / ampere`
(the ordering's cost) and `dense det / hopper` (what a user switching the mode on pays). `bits` says
whether two deterministic dense runs gave identical dq/dk/dv (they must).

(Until 35a531f the mode was in the plain kernel too, and --ab timed a build with it compiled out:
results/h100-1/ was made so. The plain kernel is now that build's, byte for byte.)
"""

from __future__ import annotations

import argparse
import json

import torch

import flashbuild
from flashbuild.debug import bench

TOKENS, MODEL_DIM = 16384, 2048


def median_ms(*fns, reps: int) -> list[float]:
    """The median time of each function after 5 warm-ups each, timed in turns by flashbuild's own bench
    (time_in_turns; each call between two CUDA events, the input set alternating)."""
    for fn in fns:
        for _ in range(5):
            fn(0)
    torch.cuda.synchronize()
    ms = bench.time_in_turns({i: fn for i, fn in enumerate(fns)}, n_sets=2, reps=reps)
    return [ms[i] for i in range(len(fns))]


def inputs(m, seqlen: int, hdim: int, causal: bool, seed: int) -> dict:
    batch, nheads = TOKENS // seqlen, MODEL_DIM // hdim
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, dout = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.float16, generator=gen)
                     for _ in range(4))
    out, lse = m.ext.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    cu = torch.arange(0, (batch + 1) * seqlen, seqlen, device="cuda", dtype=torch.int32)
    packed = [t.reshape(batch * seqlen, nheads, hdim) for t in (dout, q, k, v, out)]
    lse_packed = lse.transpose(0, 1).reshape(nheads, batch * seqlen).contiguous()  # (nheads, total_q)
    return dict(dense=(dout, q, k, v, out, lse), packed=(*packed, lse_packed, cu, cu, seqlen, seqlen))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hdims", default="64,128")
    parser.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    parser.add_argument("--causal", choices=["on", "off", "both"], default="both")
    parser.add_argument("--arch", default="native", help="the build's arch")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    hdims = [int(h) for h in args.hdims.split(",")]
    causals = {"on": [True], "off": [False], "both": [False, True]}[args.causal]
    # The GPU tests' selection (both dtypes), so that run.sh builds once; the rows are fp16.
    m = flashbuild.load(hdim=args.hdims, dtype="fp16,bf16", arch=args.arch, direction="fwd,bwd", causal=args.causal,
                        features=["local", "softcap"])
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, build {m.build_key()}")
    rows = []
    header = ("| hdim | causal | seqlen | hopper | ampere | ampere det | dense det | det / ampere | "
              "dense det / hopper | dense det TFLOPS | bits |")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for hdim in hdims:
        for causal in causals:
            for seqlen in [int(s) for s in args.seqlens.split(",")]:
                sets = [inputs(m, seqlen, hdim, causal, seed) for seed in (0, 1)]

                def dense(deterministic):
                    return lambda i: m.ext.mha_bwd(*sets[i]["dense"], causal=causal, deterministic=deterministic)

                def packed(deterministic):
                    return lambda i: m.ext.mha_varlen_bwd(*sets[i]["packed"], causal=causal, deterministic=deterministic)

                calls = [dense(False), packed(False), packed(True), dense(True)]
                hopper, ampere, ampere_det, dense_det = median_ms(*calls, reps=args.reps)
                first, again = dense(True)(0), dense(True)(0)
                same = all(torch.equal(a, b) for a, b in zip(first, again))
                batch, nheads = TOKENS // seqlen, MODEL_DIM // hdim
                flops = 2.5 * 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
                row = dict(hdim=hdim, causal=causal, seqlen=seqlen, hopper_ms=hopper, ampere_ms=ampere,
                           ampere_det_ms=ampere_det, dense_det_ms=dense_det, det_over_ampere=ampere_det / ampere,
                           dense_det_over_hopper=dense_det / hopper, dense_det_tflops=flops / dense_det / 1e9,
                           identical_bits=same)
                rows.append(row)
                print(f"| {hdim} | {'yes' if causal else 'no'} | {seqlen} | {hopper:.3f} | {ampere:.3f} | "
                      f"{ampere_det:.3f} | {dense_det:.3f} | {row['det_over_ampere']:.2f} | "
                      f"{row['dense_det_over_hopper']:.2f} | {row['dense_det_tflops']:.1f} | "
                      f"{'identical' if same else 'DIFFER'} |", flush=True)
                del sets
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, build=m.build_key(),
                           reps=args.reps, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
