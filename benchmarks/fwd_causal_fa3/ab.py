"""The causal Hopper forward's builds (one tree, kernels selected by nvcc defines) and FLASHBUILD_HOPPER_FWD_PAIRS
settings A/B-timed in one process: every arm is a (build, pairs setting); per (hdim, dtype, seqlen) the arms in
turns, one call of each per rep between CUDA events, the order flipped every round, inputs rotated past L2; the
problem as `flashbuild bench`'s (16k tokens, model dim 2048, causal FLOPs halved). Before timing, each arm's output
is compared with the base arm's (max abs difference printed; above --tol, or NaN, the row is not timed and the
script exits 1 at the end). The builds must exist in FLASHBUILD_CACHE_DIR or are built here (run.sh builds them
side by side first). Prints a table (each arm's TFLOPS, its ratio to the base per round and of the medians) and
writes OUT/ab.json.

    python3 benchmarks/fwd_causal_fa3/ab.py --out OUT [--plan study|confirm] [--rounds 3] [--reps 20] [--budget 150]
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

ENV = "FLASHBUILD_HOPPER_FWD_PAIRS"
TOKENS, MODEL_DIM = 16384, 2048  # benchmarks/README.md, "How numbers are measured"

# Builds: name -> (flashbuild.load keywords beyond direction/arch/features, nvcc flags); run.sh builds the same.
# With the kernels of this tree (kernels/hopper/fwd_mainloop.h: kPeelMasked, kOverlapSoftmax):
#   base     the one loop testing needs_mask every step, no causal overlap: the kernel before the study
#   new      the default: masked steps peeled at the 128-row tiles (hdim 96-256), no causal overlap
#   peel     masked steps peeled at every tile (hdim 64 too)
#   overlap  peeled, and the softmax under its own P V at every tile, causal too
# The first run (results/h200-1, at 9cb3166, whose defaults differed) named its arms otherwise: README.md maps them.
BUILDS = {
    "base": (dict(hdim="64,128,192,256", dtype="fp16,bf16", causal="on"), ["-DFLASHBUILD_HOPPER_FWD_PEEL=0"]),
    "new": (dict(hdim="64,128,192,256", dtype="fp16,bf16", causal="both"), []),
    "peel": (dict(hdim="64", dtype="fp16,bf16", causal="on"), ["-DFLASHBUILD_HOPPER_FWD_PEEL=1"]),
    "overlap": (dict(hdim="64,128,192,256", dtype="fp16", causal="on"),
                ["-DFLASHBUILD_HOPPER_FWD_PEEL=1", "-DFLASHBUILD_HOPPER_FWD_OVERLAP=1"]),
}
# The confirm plan's builds: the head dims it times, and the new build as its GPU tests check it.
CONFIRM_BUILDS = {
    "base": (dict(hdim="96,128,192", dtype="fp16,bf16", causal="on"), ["-DFLASHBUILD_HOPPER_FWD_PEEL=0"]),
    "new": (dict(hdim="96,128,192,256", dtype="fp16,bf16", causal="on"), []),
}


def builds(plan):
    return CONFIRM_BUILDS if plan == "confirm" else BUILDS


def plan_rows(plan):
    """(hdim, dtype, seqlen, arms); an arm is 'build' or 'build@pairs-setting'; the first arm is the base.
    study: the first run's rows (results/h200-1); confirm: the second's (hdim 96, and bf16 at 128 / 192)."""
    seqlens = (1024, 4096, 16384)
    if plan == "smoke":
        return [(128, "fp16", 4096, ["base", "new"])]
    if plan == "confirm":
        return [(h, dt, s, ["base", "new"]) for h, dt in ((96, "fp16"), (96, "bf16"), (128, "bf16"), (192, "bf16"))
                for s in seqlens]
    rows = []
    for hdim in (64, 128, 192, 256):
        for seqlen in seqlens:
            arms = ["base", "new", "peel" if hdim == 64 else None, "overlap"]
            arms = [x for x in arms if x]
            if seqlen == 16384 and hdim != 192:  # pairs at 16k, more pair rounds left to the tail (balance.py)
                arms += ["new@all:2", "new@all:4"]
            rows.append((hdim, "fp16", seqlen, arms))
    for hdim in (64, 128, 256):
        for seqlen in seqlens:
            rows.append((hdim, "bf16", seqlen, ["base", "new"] + (["peel"] if hdim == 64 else [])))
    return rows


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for ab.json (created)")
    ap.add_argument("--plan", default="study", choices=["study", "confirm", "smoke"], help="which rows and arms")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the arms' order flips each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per arm and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds after loading: no new row starts past it (rows left are listed)")
    ap.add_argument("--tol", type=float, default=2e-3, help="largest |out - base out| accepted before timing")
    ap.add_argument("--print-builds", action="store_true",
                    help="print each build of --plan as `name flashbuild-arguments` (run.sh builds them) and exit")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for a build not yet cached")
    return ap.parse_args(argv)


def main(argv):
    a = parse(argv)
    if a.print_builds:
        for name, (kw, flags) in builds(a.plan).items():
            print(name, f"--hdim {kw['hdim']} --dtype {kw['dtype']} --causal {kw['causal']}",
                  " ".join(f"--nvcc-flag={f}" for f in flags))
        return
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_plan = plan_rows(a.plan)
    needed = sorted({arm.split("@")[0] for *_, arms in rows_plan for arm in arms})
    t0 = time.time()
    mods = {b: flashbuild.load(direction="fwd", arch="sm90", features=[], nvcc_flags=builds(a.plan)[b][1],
                               jobs=a.jobs, **builds(a.plan)[b][0]) for b in needed}
    print(f"loaded {', '.join(needed)} in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped, bad = [], [], []
    for hdim, dt, seqlen, arms in rows_plan:
        name = f"fwd_hdim{hdim}_{dt}_causal"
        if time.time() - t0 > a.budget:
            skipped.append(f"{name} {seqlen}")
            continue
        r = measure(torch, mods, hdim, dt, seqlen, arms, a, l2)
        r["variant"] = name
        rows.append(r)
        if r.get("error"):
            bad.append(f"{name} {seqlen}: {r['error']}")
            print(f"  {name} {seqlen}: {r['error']}", flush=True)
            continue
        print(f"  {name} {seqlen}: " + " ".join(f"{s} {r['tflops'][s]:.1f}" for s in arms)
              + "  maxdiff " + " ".join(f"{s} {r['maxdiff'][s]:.1e}" for s in arms[1:]), flush=True)
    os.environ.pop(ENV, None)
    (out_dir / "ab.json").write_text(json.dumps({"rows": rows, "skipped": skipped, "bad": bad, "builds": builds(a.plan), "plan": a.plan,
                                                 "device": torch.cuda.get_device_name()}, indent=1))
    print(f"{'variant':<24} {'seqlen':>6} {'arm':>10} {'TFLOPS':>7} {'/ base per round':>22} {'/ base':>7}")
    for r in rows:
        if r.get("error"):
            continue
        base = r["arms"][0]
        for s in r["arms"]:
            per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"][s]) if s != base else ""
            ratio = f"{r['ratio'][s]:.3f}" if s != base else ""
            print(f"{r['variant']:<24} {r['seqlen']:>6} {s:>10} {r['tflops'][s]:>7.1f} {per:>22} {ratio:>7}")
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")
    if bad:
        print("outputs differ beyond --tol: " + "; ".join(bad))
        sys.exit(1)


def measure(torch, mods, hdim, dt, seqlen, arms, a, l2):
    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 4  # q, k, v, out
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]

    def call(arm, i):
        build, _, setting = arm.partition("@")
        if setting:
            os.environ[ENV] = setting
        else:
            os.environ.pop(ENV, None)
        q, k, v = sets[i % n_sets]
        return mods[build].flash_attn_func(q, k, v, causal=True)

    row = {"hdim": hdim, "dtype": dt, "seqlen": seqlen, "batch": batch, "nheads": nheads, "arms": arms}
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
                build, _, setting = s.partition("@")
                if setting:  # set outside the events: the launch reads it on the host
                    os.environ[ENV] = setting
                else:
                    os.environ.pop(ENV, None)
                q, k, v = sets[(i * len(order) + j) % n_sets]  # never the inputs the call before read (L2)
                start, end = ev[s][i]
                start.record()
                mods[build].flash_attn_func(q, k, v, causal=True)
                end.record()
        torch.cuda.synchronize()
        for s in arms:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = 4 * batch * nheads * seqlen * seqlen * hdim / 2
    med = {s: statistics.median(ms[s]) for s in arms}
    base = arms[0]
    row.update({"ms_rounds": ms, "tflops": {s: flops / med[s] / 1e9 for s in arms},
                "ratio_rounds": {s: [b / x for b, x in zip(ms[base], ms[s])] for s in arms[1:]},
                "ratio": {s: med[base] / med[s] for s in arms[1:]}})
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
