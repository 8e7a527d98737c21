#!/usr/bin/env python3
"""The Hopper forward's builds (hdim 128 unless --hdim) (one tree, kernels chosen by nvcc defines) A/B-timed in one process, with
PyTorch SDPA's cuDNN backend in the same turns: per (dtype, causal, seqlen) one call of each arm per rep between
CUDA events, the order flipped every round, inputs rotated past twice the L2; the problem as `flashbuild bench`'s
(16k tokens, model dim 2048, causal FLOPs halved). Before timing, every arm's output is compared with the base
arm's (bitwise equality recorded; beyond --tol, or NaN, the row is not timed and the script exits 1 at the end).
Builds not in FLASHBUILD_CACHE_DIR are built here (run.sh builds them side by side first). Prints a table (each
arm's TFLOPS, its ratio to the base per round and of the medians, cuDNN's TFLOPS) and writes OUT/ab.json.

    python3 benchmarks/fwd_sass_fa3/ab.py --out OUT [--rounds 3] [--reps 20] [--budget 120] [--print-builds]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time

TOKENS, MODEL_DIM = 16384, 2048  # benchmarks/README.md, "How numbers are measured"
SELECTION = dict(hdim="128", dtype="fp16,bf16", causal="both")
# Arms: name -> nvcc flags (kernels/hopper/fwd_mainloop.h: kUniformQ, kEdgeTurns, kLeadWaits; a define set
# applies to every kernel of the build); the first arm of --arms is the base.
#   base    the tree before the study (Q's descriptors by thread index, turns on a tile's edges, every warpgroup waits)
#   new     this tree's defaults (kUniformQ in hdim 128's plain kernels; FA3's turns and waits in the 176-key one;
#           from after call 3, kRowLimits in the causal kernel)
#   uq      kUniformQ alone, every kernel                          (call 1)
#   turns   FA3's form alone: no edge turns, the lead waits       (call 1, then one define: FA3_TURNS=1)
#   both    uq and turns, every kernel                             (call 1)
#   lead    uq and the lead waits, edge turns kept, every kernel   (call 2)
#   edge    uq and no edge turns, every warpgroup waits           (call 2)
#   rows    the defaults and kRowLimits (the mask by a per-row limit, FA3's)           (call 3)
#   early   the defaults and kPassAfterQK (the overlapped turn passed after Q K^T)     (call 3)
#   re      the defaults, kRowLimits and kPassAfterQK                                   (call 3)
#   lw      the defaults and the lead waits in every kernel (the 128-key ones too)      (call 4)
#   fa3t    the defaults and FA3's turns and waits in every kernel (no edge turns, lead waits) (call 4)
#   ov      the softmax under the own P V (kOverlapSoftmax) in every kernel: hdim 64's 3-warpgroup tile (../fwd_causal_176/)
#   c176    every kernel on 128 x 176 tiles, the causal one too (fwd_tile's sweep override): ../fwd_causal_176/
#   uq1     the defaults and kUniformQ in every kernel (hdim 192 and 256: the R2UR of their steps, README's last section)
#   max4, sum4, ms4: the row max (same bits) / the row sum (other bits) / both in 4 independent chains (call h200-6, at
#           810e4f9: the sum's knob is gone since; max4 became hdim 128's causal default, FwdMainloop::kMaxChains)
#   max1, max2, max8: every kernel's row max in 1 (the single chain of before), 2 or 8 chains
#   nov4    every kernel's softmax after its own P V (no kOverlapSoftmax) and its row max in 4 chains
#   peel    every causal tile's masked steps peeled into a loop of their own (FwdMainloop::kPeelTile; off at hdim 64)
#   (clamp: a keyless row's exponent offset by one FMNMX, not an -inf test and a select; in 89465b0 only, call h200-13)
#   t192, t176: every kernel on 192 x 192 / 192 x 176 tiles with 3 stages (fwd_tile's sweep override; for hdim 64, whose
#           default is 192 x 128 with 4 stages: FA3's non-causal hdim-64 tile is 192 x 192): ../fwd_tile_hdim64_wide/
#   w192    every kernel on 128 x 192 tiles with 3 stages, two consumer warpgroups (fwd_tile's sweep override; at hdim
#           64: 386 instructions a step per 128 keys against the default's 427, README "hdim 64 on 128 x 192")
#   (ph3, ph5, ph8, ph10: the overlapped kernels' P V in two commit groups, the first 3 / 5 / 8 / 10 of its 16-key
#           slices and the rest, the first slices' P converted among the exponentials; in ea6be63 only, call h200-17)
#   uqp     kUniformQ and the peeled masked steps in every kernel (for hdim 32, which takes hdim 64's tile and neither)
#   (ps128, ps192: P through shared memory, on the default tile / on 192 x 192; in 3bcdf53 only: ../fwd_tile_hdim64_wide/)
#   (e2, e4, e8, e4d4: a share of the exponentials on the FMA pipe; in 8742183 only, with the form: ../fwd_exp_on_fma/)
def _flags(uq, edge, lead):
    return [f"-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q={uq}", f"-DFLASHBUILD_HOPPER_FWD_EDGE_TURNS={edge}",
            f"-DFLASHBUILD_HOPPER_FWD_LEAD_WAITS={lead}"]


ARMS = {
    "base": _flags(0, 1, 0),
    "new": [],
    "uq": _flags(1, 1, 0),
    "turns": _flags(0, 0, 1),
    "both": _flags(1, 0, 1),
    "lead": _flags(1, 1, 1),
    "edge": _flags(1, 0, 0),
    "rows": ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1"],
    "early": ["-DFLASHBUILD_HOPPER_FWD_PASS_AFTER_QK=1"],
    "re": ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1", "-DFLASHBUILD_HOPPER_FWD_PASS_AFTER_QK=1"],
    "lw": ["-DFLASHBUILD_HOPPER_FWD_LEAD_WAITS=1"],
    "fa3t": ["-DFLASHBUILD_HOPPER_FWD_EDGE_TURNS=0", "-DFLASHBUILD_HOPPER_FWD_LEAD_WAITS=1"],
    "ov": ["-DFLASHBUILD_HOPPER_FWD_OVERLAP=1"],
    "uq1": ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1"],
    "max4": ["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=4"],
    "max1": ["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=1"],
    "max2": ["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=2"],
    "max8": ["-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=8"],
    "nov4": ["-DFLASHBUILD_HOPPER_FWD_OVERLAP=0", "-DFLASHBUILD_HOPPER_FWD_MAX_CHAINS=4"],
    "c176": ["-DFLASHBUILD_HOPPER_BLOCK_M=128", "-DFLASHBUILD_HOPPER_BLOCK_N=176", "-DFLASHBUILD_HOPPER_STAGES=2"],
    "peel": ["-DFLASHBUILD_HOPPER_FWD_PEEL=1"],
    "t192": ["-DFLASHBUILD_HOPPER_BLOCK_M=192", "-DFLASHBUILD_HOPPER_BLOCK_N=192", "-DFLASHBUILD_HOPPER_STAGES=3"],
    "t176": ["-DFLASHBUILD_HOPPER_BLOCK_M=192", "-DFLASHBUILD_HOPPER_BLOCK_N=176", "-DFLASHBUILD_HOPPER_STAGES=3"],
    "w192": ["-DFLASHBUILD_HOPPER_BLOCK_M=128", "-DFLASHBUILD_HOPPER_BLOCK_N=192", "-DFLASHBUILD_HOPPER_STAGES=3"],
    "uqp": ["-DFLASHBUILD_HOPPER_FWD_UNIFORM_Q=1", "-DFLASHBUILD_HOPPER_FWD_PEEL=1"],
}
DEFAULT_ARMS = "base,new,lead,edge"
CUDNN = "cudnn"


def plan_rows(causal="both", seqlens=(1024, 4096, 16384)):
    """(dtype, causal, seqlen): fp16 first, 16k last within a dtype (by default the rows issue 46's table names)."""
    flags = {"both": (False, True), "off": (False,), "on": (True,)}[causal]
    return [(dt, c, s) for dt in ("fp16", "bf16") for c in flags for s in seqlens]


def _lengths(text):
    """--seqlens: positive whole numbers, comma-separated (argparse names the option on a bad one)."""
    items = [x for x in text.split(",") if x]
    if not items or not all(x.isdigit() and int(x) > 0 for x in items):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive whole numbers")
    return [int(x) for x in items]


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", help="folder for ab.json (created); needed unless --print-builds")
    ap.add_argument("--arms", default=DEFAULT_ARMS,
                    help=f"comma list of arms, the first the base (default {DEFAULT_ARMS}; call 1: base,uq,turns,both)")
    ap.add_argument("--hdim", type=int, default=128, help="the head dim of the builds and rows")
    ap.add_argument("--causal", choices=("both", "off", "on"), default="both", help="which rows: causal, not, both")
    ap.add_argument("--seqlens", default="1024,4096,16384", type=_lengths, help="sequence lengths, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the arms' order flips each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per arm and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds after loading: no new row starts past it (rows left are listed)")
    ap.add_argument("--tol", type=float, default=2e-3, help="largest |out - base out| accepted before timing")
    ap.add_argument("--print-builds", action="store_true",
                    help="print each arm as `name flashbuild-arguments` (run.sh builds them) and exit")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for a build not yet cached")
    a = ap.parse_args(argv)
    a.arms = [x for x in a.arms.split(",") if x]
    unknown = [x for x in a.arms if x not in ARMS]
    if unknown or not a.arms:
        ap.error(f"--arms: unknown {', '.join(unknown) or '(none given)'}; the arms are {', '.join(ARMS)}")
    if not a.print_builds and not a.out:
        ap.error("--out is needed (the folder for ab.json)")
    return a


def main(argv):
    a = parse(argv)
    if a.print_builds:
        for name in a.arms:
            print(name, f"--hdim {a.hdim} --dtype {SELECTION['dtype']} --causal {SELECTION['causal']}",
                  " ".join(f"--nvcc-flag={f}" for f in ARMS[name]))
        return
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    mods = {b: flashbuild.load(direction="fwd", arch="sm90", features=[], nvcc_flags=ARMS[b], jobs=a.jobs,
                               **{**SELECTION, "hdim": str(a.hdim)}) for b in a.arms}
    print(f"loaded {', '.join(a.arms)} in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped, bad = [], [], []
    for dt, causal, seqlen in plan_rows(a.causal, a.seqlens):
        name = f"fwd_hdim{a.hdim}_{dt}{'_causal' if causal else ''}"
        if time.time() - t0 > a.budget:
            skipped.append(f"{name} {seqlen}")
            continue
        r = measure(torch, mods, dt, causal, seqlen, a, l2)
        r["variant"] = name
        rows.append(r)
        if r.get("error"):
            bad.append(f"{name} {seqlen}: {r['error']}")
            print(f"  {name} {seqlen}: {r['error']}", flush=True)
            continue
        print(f"  {name} {seqlen}: " + " ".join(f"{s} {r['tflops'][s]:.1f}" for s in r["arms"])
              + "  maxdiff " + " ".join(f"{s} {r['maxdiff'][s]:.1e}" for s in a.arms[1:]), flush=True)
    (out_dir / "ab.json").write_text(json.dumps({"rows": rows, "skipped": skipped, "bad": bad, "arms": ARMS,
                                                 "device": torch.cuda.get_device_name()}, indent=1))
    base = a.arms[0]
    print(f"{'variant':<24} {'seqlen':>6} {'arm':>6} {'TFLOPS':>7} {'/ base per round':>22} {'/ base':>7} {'x cuDNN':>8}")
    for r in rows:
        if r.get("error"):
            continue
        for s in r["arms"]:
            per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"][s]) if s != base else ""
            ratio = f"{r['ratio'][s]:.3f}" if s != base else ""
            xc = f"{r['tflops'][s] / r['tflops'][CUDNN]:.3f}" if s != CUDNN and r["tflops"].get(CUDNN) else ""
            print(f"{r['variant']:<24} {r['seqlen']:>6} {s:>6} {r['tflops'][s]:>7.1f} {per:>22} {ratio:>7} {xc:>8}")
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")
    if bad:
        print("outputs differ beyond --tol: " + "; ".join(bad))
        sys.exit(1)


def cudnn_call(torch):
    """SDPA's cuDNN backend on (batch, seqlen, heads, dim) tensors, or None where this torch has none."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None

    def call(q, k, v, causal):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)
    return call


def measure(torch, mods, dt, causal, seqlen, a, l2):
    hdim = a.hdim
    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 4  # q, k, v, out
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]
    sdpa = cudnn_call(torch)
    arms = list(a.arms)

    def call(arm, i):
        q, k, v = sets[i % n_sets]
        if arm == CUDNN:
            return sdpa(q, k, v, causal)
        return mods[arm].flash_attn_func(q, k, v, causal=causal)

    row = {"hdim": hdim, "dtype": dt, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads}
    outs = {s: call(s, 0) for s in arms}  # also the warm-up's first call
    row["maxdiff"] = {}
    for s in arms[1:]:
        d = (outs[s].float() - outs[arms[0]].float()).abs().max().item()
        row["maxdiff"][s] = d
        if not math.isfinite(d) or d > a.tol or not torch.isfinite(outs[s]).all():
            row["error"] = f"{s} differs from {arms[0]} by {d:.3e} (NaN/inf or past --tol {a.tol})"
            return row
    row["bitwise_equal"] = {s: bool(torch.equal(outs[s], outs[arms[0]])) for s in arms[1:]}
    del outs
    if sdpa is not None:
        try:
            call(CUDNN, 0)
            arms.append(CUDNN)
        except RuntimeError as e:  # no cuDNN attention for this shape or build: timed without it
            row["cudnn_error"] = str(e)[:200]
    row["arms"] = arms
    for i in range(3):
        for s in arms:
            call(s, i)
    ms = {s: [] for s in arms}
    for rnd in range(a.rounds):
        order = arms if rnd % 2 == 0 else arms[::-1]
        ev = {s: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
              for s in arms}
        for i in range(a.reps):
            for j, s in enumerate(order):
                start, end = ev[s][i]
                start.record()
                call(s, i * len(order) + j)  # never the inputs the call before read (L2)
                end.record()
        torch.cuda.synchronize()
        for s in arms:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
    med = {s: statistics.median(ms[s]) for s in arms}
    base = arms[0]
    row.update({"ms_rounds": ms, "tflops": {s: flops / med[s] / 1e9 for s in arms},
                "ratio_rounds": {s: [b / x for b, x in zip(ms[base], ms[s])] for s in arms[1:]},
                "ratio": {s: med[base] / med[s] for s in arms[1:]}})
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
