#!/usr/bin/env python3
"""The hdim-64 causal Hopper forward's builds (one tree, kernels chosen by nvcc defines) A/B-timed in one process
with PyTorch SDPA's cuDNN backend in the same turns: per (dtype, seqlen) one call of each arm per rep between CUDA
events, the order flipped every round, inputs rotated past twice the L2; the problem as `flashbuild bench`'s (16k
tokens, model dim 2048: 32 heads of 64, causal FLOPs halved). Before timing every arm's output is compared with the
base arm's (bitwise equality recorded; past --tol, or NaN, the row is not timed and the script exits 1 at the end).
Builds not in FLASHBUILD_CACHE_DIR are built here (run.sh builds them side by side first). Prints a table (TFLOPS,
ratio to the base per round and of the medians, x cuDNN) and writes OUT/ab.json.

    python3 benchmarks/fwd_short_hdim64/ab.py --out OUT [--arms base,block,qearly,blockq,noedge] [--rounds 3] [--reps 30]
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

TOKENS, MODEL_DIM, HDIM = 16384, 2048, 64  # benchmarks/README.md, "How numbers are measured"
SELECTION = dict(hdim=str(HDIM), dtype="fp16,bf16", causal="on")
M128 = ["-DFLASHBUILD_HOPPER_BLOCK_M=128", "-DFLASHBUILD_HOPPER_BLOCK_N=128", "-DFLASHBUILD_HOPPER_STAGES=4"]
# Arms: name -> nvcc flags (a define applies to every kernel of the build; README.md says why each):
#   base    the tree's hdim-64 causal kernel: 192 x 128, three consumer warpgroups, the mask element by element,
#           one loop testing needs_mask every step
#   rl      kRowLimits (fwd_mainloop.h: the mask by one limit a row, FA3's; on at hdim 128-256 since
#           benchmarks/fwd_sass_fa3 call 3): same scores, so the same bits as base
#   rlpeel  rl and kPeelMasked (the masked steps a loop of their own): the same bits as base
#   skip    kSkipIdleQK (fwd_mainloop.h): a warpgroup whose rows see no key of a tile's first walked block issues no
#           Q K^T there (the mask sets those scores to -inf all the same): the same bits as base
#   rlskip  rl and skip: the same bits as base
#   m128    the 128 x 128 tile (two consumer warpgroups, 4 stages, ping-pong; peeled, as every two-warpgroup tile)
#   m128rl  m128 with kRowLimits
# (call h200-1, tree f79879c: rl, skip and rlskip against that tree's base; since 400fcb9 base is rlskip, so these
# three are base again on a later tree. The arms of call h200-2, against that base:)
#   block   kSkipIdleBlock (fwd_mainloop.h): an idle warpgroup (no key of the tile's first walked block) releases
#           that block's K and V unread and starts at the next block: no masked softmax over -inf, no P V over
#           zeros (the half of the idle slices kSkipIdleQK left): the same bits as base
#   qearly  kEarlyQDone (fwd_mainloop.h): sQ released for the next tile's Q in the last step, before its softmax,
#           rather than after the walk: the same bits as base
#   blockq  both
#   noedge  kEdgeTurns off (fwd_mainloop.h): a tile's first Q K^T and last P V issued without a ping-pong turn, FA3's
#           way (lost at 1k on hdim 128's 128-key tiles, benchmarks/fwd_sass_fa3; a per-tile cost at 1-8 steps a
#           tile): the same bits as base
#   noblock kSkipIdleBlock off (on by default since call h200-2): call h200-3 times the default against it
SKIP_IDLE_BLOCK = ["-DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK=1"]
EARLY_Q_DONE = ["-DFLASHBUILD_HOPPER_FWD_EARLY_Q_DONE=1"]
ARMS = {
    "base": [],
    "rl": ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1"],
    "rlpeel": ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1", "-DFLASHBUILD_HOPPER_FWD_PEEL=1"],
    "skip": ["-DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_QK=1"],
    "rlskip": ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1", "-DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_QK=1"],
    "m128": M128,
    "m128rl": M128 + ["-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1"],
    "block": SKIP_IDLE_BLOCK,
    "qearly": EARLY_Q_DONE,
    "blockq": SKIP_IDLE_BLOCK + EARLY_Q_DONE,
    "noedge": ["-DFLASHBUILD_HOPPER_FWD_EDGE_TURNS=0"],
    "noblock": ["-DFLASHBUILD_HOPPER_FWD_SKIP_IDLE_BLOCK=0"],
}
DEFAULT_ARMS = "base,block,qearly,blockq,noedge"  # call h200-1: --arms base,rl,skip,rlskip,m128,m128rl
CUDNN = "cudnn"


def plan_rows(seqlens):
    """(dtype, seqlen): fp16 first; 1k (the row under 0.95x cuDNN) first within a dtype."""
    return [(dt, s) for dt in ("fp16", "bf16") for s in seqlens]


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", help="folder for ab.json (created); needed unless --print-builds")
    ap.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma list of arms, the first the base (default {DEFAULT_ARMS})")
    ap.add_argument("--seqlens", default="1024,2048,4096,16384", help="sequence lengths, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the arms' order flips each)")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per arm and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds after loading: no new row starts past it (rows left are listed)")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="largest |out - base out| accepted before timing (a bf16 ulp near 2 is 1.6e-2: other tiles "
                         "round P V's sums in another order)")
    ap.add_argument("--print-builds", action="store_true",
                    help="print each arm as `name flashbuild-arguments` (run.sh builds them) and exit")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for a build not yet cached")
    a = ap.parse_args(argv)
    a.arms = [x for x in a.arms.split(",") if x]
    unknown = [x for x in a.arms if x not in ARMS]
    if unknown or not a.arms:
        ap.error(f"--arms: unknown {', '.join(unknown) or '(none given)'}; the arms are {', '.join(ARMS)}")
    try:
        a.seqlens = [int(s) for s in a.seqlens.split(",")]
    except ValueError:
        ap.error(f"--seqlens: {a.seqlens!r} is not a comma list of whole numbers (e.g. 1024,4096)")
    if not a.print_builds and not a.out:
        ap.error("--out is needed (the folder for ab.json)")
    return a


def main(argv):
    a = parse(argv)
    if a.print_builds:
        for name in a.arms:
            print(name, f"--hdim {SELECTION['hdim']} --dtype {SELECTION['dtype']} --causal {SELECTION['causal']}",
                  " ".join(f"--nvcc-flag={f}" for f in ARMS[name]))
        return
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    mods = {b: flashbuild.load(direction="fwd", arch="sm90", features=[], nvcc_flags=ARMS[b], jobs=a.jobs,
                               **SELECTION) for b in a.arms}
    print(f"loaded {', '.join(a.arms)} in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)
    # Clocks up before the first row (the card idles low): about a second of matrix products.
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    for _ in range(80):
        x @ x
    torch.cuda.synchronize()
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped, bad = [], [], []
    for dt, seqlen in plan_rows(a.seqlens):
        name = f"fwd_hdim{HDIM}_{dt}_causal"
        if time.time() - t0 > a.budget:
            skipped.append(f"{name} {seqlen}")
            continue
        r = measure(torch, mods, dt, seqlen, a, l2)
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
    print(f"{'variant':<24} {'seqlen':>6} {'arm':>6} {'TFLOPS':>7} {'/ base per round':>22} {'/ base':>7}"
          f" {'x cuDNN':>8} {'bits':>5}")
    for r in rows:
        if r.get("error"):
            continue
        for s in r["arms"]:
            per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"][s]) if s not in (base, CUDNN) else ""
            ratio = f"{r['ratio'][s]:.3f}" if s not in (base, CUDNN) else ""
            xc = f"{r['tflops'][s] / r['tflops'][CUDNN]:.3f}" if s != CUDNN and r["tflops"].get(CUDNN) else ""
            bits = {True: "same", False: "diff"}.get(r["bitwise_equal"].get(s), "")
            print(f"{r['variant']:<24} {r['seqlen']:>6} {s:>6} {r['tflops'][s]:>7.1f} {per:>22} {ratio:>7} {xc:>8}"
                  f" {bits:>5}")
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

    def call(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    return call


def measure(torch, mods, dt, seqlen, a, l2):
    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // HDIM
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, HDIM)
    per_set = batch * seqlen * nheads * HDIM * 2 * 4  # q, k, v, out
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]
    sdpa = cudnn_call(torch)
    arms = list(a.arms)

    def call(arm, i):
        q, k, v = sets[i % n_sets]
        if arm == CUDNN:
            return sdpa(q, k, v)
        return mods[arm].flash_attn_func(q, k, v, causal=True)

    row = {"hdim": HDIM, "dtype": dt, "causal": True, "seqlen": seqlen, "batch": batch, "nheads": nheads}
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
        # A head start for the queue: a 1k call (~0.1 ms) takes about as long to launch from Python, and an event
        # recorded on an idle GPU would time the launch too.
        torch.cuda._sleep(50_000_000)
        for i in range(a.reps):
            for j, s in enumerate(order):
                start, end = ev[s][i]
                start.record()
                call(s, i * len(order) + j)  # never the inputs the call before read (L2)
                end.record()
        torch.cuda.synchronize()
        for s in arms:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = 4 * batch * nheads * seqlen * seqlen * HDIM / 2
    med = {s: statistics.median(ms[s]) for s in arms}
    base = arms[0]
    row.update({"ms_rounds": ms, "tflops": {s: flops / med[s] / 1e9 for s in arms},
                "ratio_rounds": {s: [b / x for b, x in zip(ms[base], ms[s])] for s in arms[1:]},
                "ratio": {s: med[base] / med[s] for s in arms[1:]}})
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
