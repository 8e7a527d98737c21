"""FLASHBUILD_HOPPER_FWD_PAIRS settings A/B-timed in one process (kernels/hopper/fwd_launch.h reads the
variable at every launch): one build of the causal Hopper forward, then per (hdim, dtype, seqlen) the
settings in turns, one call of each per rep between CUDA events, the order flipped every round, inputs
rotated past L2; the problem as `flashbuild bench`'s (16k tokens, model dim 2048, causal FLOPs halved).
The settings only reorder the tiles, so their outputs must be the same bits: checked before timing.
Prints a table (each round's ratio to the first setting, and the medians) and writes OUT/pairs_ab.json.

    python3 benchmarks/fwd_tile_turnover/pairs_ab.py --out OUT [--hdim 64,128,256] [--dtype fp16,bf16]
        [--seqlens 1024,4096,16384] [--settings short,all] [--rounds 3] [--reps 20] [--budget 150]
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


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for pairs_ab.json (created)")
    ap.add_argument("--hdim", default="64,128,256", help="head dims, comma-separated")
    ap.add_argument("--dtype", default="fp16,bf16", help="fp16 and/or bf16, comma-separated")
    ap.add_argument("--seqlens", default="1024,4096,16384", help="sequence lengths, comma-separated")
    ap.add_argument("--settings", default="short,all", help=f"{ENV} values to compare; the first is the base")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the settings' order flips each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per setting and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds after the build: no new row starts past it (rows left are listed)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for the build")
    return ap.parse_args(argv)


def main(argv):
    a = parse(argv)
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    hdims = [int(h) for h in a.hdim.split(",")]
    dtypes = a.dtype.split(",")
    seqlens = [int(s) for s in a.seqlens.split(",")]
    settings = a.settings.split(",")
    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    m = flashbuild.load(hdim=",".join(map(str, hdims)), dtype=",".join(dtypes), arch="sm90", direction="fwd",
                        causal="on", features=[], jobs=a.jobs)
    print(f"built and loaded in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped = [], []
    for hdim in hdims:
        for dt in dtypes:
            for seqlen in seqlens:
                name = f"fwd_hdim{hdim}_{dt}_causal_sm90"
                if time.time() - t0 > a.budget:
                    skipped.append(f"{name} {seqlen}")
                    continue
                rows.append(measure(torch, m, name, hdim, dt, seqlen, settings, a, l2))
                r = rows[-1]
                print(f"  {name} {seqlen}: " + " ".join(f"{s} {r['tflops'][s]:.1f}" for s in settings), flush=True)
    os.environ.pop(ENV, None)
    (out_dir / "pairs_ab.json").write_text(json.dumps({"settings": settings, "rows": rows, "skipped": skipped,
                                                       "device": torch.cuda.get_device_name()}, indent=1))
    base = settings[0]
    head = f"{'variant':<28} {'seqlen':>6}" + "".join(f" {s + ' TF':>9}" for s in settings)
    head += "".join(f" {s + '/' + base + ' per round':>26} {s + '/' + base:>10}" for s in settings[1:])
    print(head)
    for r in rows:
        line = f"{r['variant']:<28} {r['seqlen']:>6}" + "".join(f" {r['tflops'][s]:>9.1f}" for s in settings)
        for s in settings[1:]:
            per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"][s])
            line += f" {per:>26} {r['ratio'][s]:>10.3f}"
        print(line)
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")


def measure(torch, m, name, hdim, dt, seqlen, settings, a, l2):
    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 4  # q, k, v, out
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]

    def call(setting, i):
        os.environ[ENV] = setting
        q, k, v = sets[i % n_sets]
        return m.flash_attn_func(q, k, v, causal=True)

    outs = {s: call(s, 0) for s in settings}  # also the warm-up's first call
    for s in settings[1:]:
        if not torch.equal(outs[s], outs[settings[0]]):
            sys.exit(f"{name} {seqlen}: {ENV}={s} and ={settings[0]} give different outputs: a tile computed twice "
                     f"or never (run tests/gpu/test_fwd_causal_pairs_gpu.py)")
    for i in range(3):
        for s in settings:
            call(s, i)
    ms = {s: [] for s in settings}
    for rnd in range(a.rounds):
        order = settings if rnd % 2 == 0 else settings[::-1]
        ev = {s: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
              for s in settings}
        for i in range(a.reps):
            for j, s in enumerate(order):
                os.environ[ENV] = s  # set outside the events: the launch reads it on the host
                q, k, v = sets[(i * len(order) + j) % n_sets]  # never the inputs the call before read (L2)
                start, end = ev[s][i]
                start.record()
                m.flash_attn_func(q, k, v, causal=True)
                end.record()
        torch.cuda.synchronize()
        for s in settings:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = 4 * batch * nheads * seqlen * seqlen * hdim / 2
    med = {s: statistics.median(ms[s]) for s in settings}
    base = settings[0]
    return {"variant": name, "seqlen": seqlen, "batch": batch, "nheads": nheads, "ms_rounds": ms,
            "tflops": {s: flops / med[s] / 1e9 for s in settings},
            "ratio_rounds": {s: [b / x for b, x in zip(ms[base], ms[s])] for s in settings[1:]},
            "ratio": {s: med[base] / med[s] for s in settings[1:]}}


if __name__ == "__main__":
    main(sys.argv[1:])
