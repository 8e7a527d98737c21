"""The non-causal hdim-128 Hopper forward on 128 x 176 tiles against 128 x 128, A/B-timed in one process: one build
holds both kernels (kernels/hopper/fwd_params.h, kWideKeys; the 128-key one is main's kernel, its SASS the same),
and FLASHBUILD_HOPPER_FWD_WIDE_FROM, read at every launch (fwd_launch.h), picks one: 2147483647 the 128-key kernel
("128"), 0 the 176-key one ("176"). Per row the two in turns, one call of each per rep between CUDA events, the
order flipped every round, inputs rotated past L2; dense rows as `flashbuild bench` (16k tokens, model dim 2048),
packed rows (flash_attn_varlen_func) of a fixed seed's lengths. The two outputs are compared before timing.
Prints a table (each round's ratio new/base and the medians) and writes OUT/ab.json.

    python3 benchmarks/fwd_tile_hdim128_176/ab.py --out OUT [--dtype fp16,bf16] [--seqlens 512,...,16384]
        [--varlen 16x256-1792,4x2048-6144] [--rounds 3] [--reps 20] [--budget 150]
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import pathlib
import random
import statistics
import sys
import time

ENV = "FLASHBUILD_HOPPER_FWD_WIDE_FROM"
SETTINGS = {"128": str(2**31 - 1), "176": "0"}  # base first
TOKENS, MODEL_DIM, HDIM = 16384, 2048, 128  # benchmarks/README.md, "How numbers are measured"


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for ab.json (created)")
    ap.add_argument("--dtype", default="fp16,bf16", help="fp16 and/or bf16, comma-separated")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384",
                    help="dense sequence lengths, comma-separated")
    ap.add_argument("--varlen", default="16x256-1792,4x2048-6144",
                    help="packed rows: NxLO-HI, N sequences of lengths drawn from [LO, HI] (seed 0), comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the order flips each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per kernel and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds after the build: no new row starts past it (rows left are listed)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for the build")
    return ap.parse_args(argv)


def varlen_shapes(spec: str) -> list[tuple[str, list[int]]]:
    shapes = []
    for item in filter(None, spec.split(",")):
        count, span = item.split("x")
        lo, hi = map(int, span.split("-"))
        rng = random.Random(0)
        shapes.append((f"varlen {item}", [rng.randint(lo, hi) for _ in range(int(count))]))
    return shapes


def main(argv):
    a = parse(argv)
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    dtypes = a.dtype.split(",")
    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    # run.sh's build (the split-KV variant beside, for its tests' cache calls): one build for the whole call.
    m = flashbuild.load(hdim=HDIM, dtype=",".join(dtypes), arch="sm90", direction="fwd,splitkv", causal="both",
                        features=[], jobs=a.jobs)
    print(f"built and loaded in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    shapes = [(f"dense {s}", [s] * max(1, TOKENS // s)) for s in map(int, a.seqlens.split(","))]
    shapes += varlen_shapes(a.varlen)
    rows, skipped = [], []
    for dt in dtypes:
        for label, lens in shapes:
            if time.time() - t0 > a.budget:
                skipped.append(f"{dt} {label}")
                continue
            rows.append(measure(torch, m, dt, label, lens, a, l2))
            r = rows[-1]
            print(f"  {dt} {label}: " + " ".join(f"{s} {r['tflops'][s]:.1f}" for s in SETTINGS)
                  + f" (max |diff| {r['max_diff']:.2e})", flush=True)
    os.environ.pop(ENV, None)
    (out_dir / "ab.json").write_text(json.dumps({"settings": SETTINGS, "rows": rows, "skipped": skipped,
                                                 "device": torch.cuda.get_device_name()}, indent=1))
    print(f"{'dtype':<5} {'shape':<22} {'128 TF':>8} {'176 TF':>8} {'176/128 per round':>24} {'176/128':>8}")
    for r in rows:
        per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"])
        print(f"{r['dtype']:<5} {r['shape']:<22} {r['tflops']['128']:>8.1f} {r['tflops']['176']:>8.1f} {per:>24} "
              f"{r['ratio']:>8.3f}")
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")


def measure(torch, m, dt, label, lens, a, l2):
    nheads = MODEL_DIM // HDIM
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    dense = label.startswith("dense")
    shape = (len(lens), lens[0], nheads, HDIM) if dense else (sum(lens), nheads, HDIM)
    per_set = math.prod(shape) * 2 * 4  # q, k, v, out
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]
    cu = torch.tensor([0, *itertools.accumulate(lens)], device="cuda", dtype=torch.int32)

    def call(setting, i):
        os.environ[ENV] = SETTINGS[setting]  # read by the launch on the host
        q, k, v = sets[i % n_sets]
        if dense:
            return m.flash_attn_func(q, k, v)
        return m.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens))

    outs = {s: call(s, 0) for s in SETTINGS}  # also the warm-up's first call
    diff = (outs["176"].float() - outs["128"].float()).abs().max().item()
    if not math.isfinite(diff) or diff > 2e-2:
        sys.exit(f"{dt} {label}: the 176-key and 128-key kernels differ by {diff} (run "
                 f"tests/gpu/test_fwd_wide_keys_gpu.py)")
    for i in range(3):
        for s in SETTINGS:
            call(s, i)
    ms = {s: [] for s in SETTINGS}
    names = list(SETTINGS)
    for rnd in range(a.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        ev = {s: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
              for s in names}
        for i in range(a.reps):
            for j, s in enumerate(order):
                os.environ[ENV] = SETTINGS[s]  # outside the events
                q, k, v = sets[(i * len(order) + j) % n_sets]  # never the inputs the call before read (L2)
                start, end = ev[s][i]
                start.record()
                if dense:
                    m.flash_attn_func(q, k, v)
                else:
                    m.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens))
                end.record()
        torch.cuda.synchronize()
        for s in names:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = sum(4 * nheads * s * s * HDIM for s in lens)
    med = {s: statistics.median(ms[s]) for s in names}
    return {"dtype": dt, "shape": label, "lens": lens, "nheads": nheads, "ms_rounds": ms, "max_diff": diff,
            "tflops": {s: flops / med[s] / 1e9 for s in names},
            "ratio_rounds": [b / x for b, x in zip(ms["128"], ms["176"])], "ratio": med["128"] / med["176"]}


if __name__ == "__main__":
    main(sys.argv[1:])
