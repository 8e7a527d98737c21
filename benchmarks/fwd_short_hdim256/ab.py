"""Builds of the Hopper forward A/B-timed in turns in one process, with SDPA's cuDNN backend in the same turns:
each build's extension (a .so that `flashbuild build` linked, from its own tree or nvcc flags) is imported side
by side, and per (hdim, dtype, causal, seqlen) every build that holds the variant, then cuDNN, run one call each
per rep between CUDA events, the order flipped every round, inputs rotated past L2; the problem as `flashbuild
bench`'s (16k tokens, model dim 2048, causal FLOPs halved). Builds whose arithmetic is the same (--same A=B)
must give the same bits: checked before timing. Prints a table last; writes OUT/ab.json.

    python3 benchmarks/fwd_short_hdim256/ab.py --out OUT --build base=/x/_flashbuild_ab12.so --build new=... \\
        [--only nrl=192:causal] [--same nrl=new] [--same base=new:256] [--hdim 192,256] [--dtype fp16,bf16] [--seqlens 1024,4096,16384]
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys
import time

TOKENS, MODEL_DIM = 16384, 2048  # benchmarks/README.md, "How numbers are measured"


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for ab.json (created)")
    ap.add_argument("--build", action="append", required=True, help="NAME=path of a linked extension; the first is the base")
    ap.add_argument("--only", action="append", default=[], help="NAME=HDIM:causal|plain: the build holds only these")
    ap.add_argument("--same", action="append", default=[],
                    help="A=B or A=B:HDIM: builds whose outputs must be bit-identical (at that head dim)")
    ap.add_argument("--hdim", default="192,256", help="head dims, comma-separated")
    ap.add_argument("--dtype", default="fp16,bf16", help="fp16 and/or bf16")
    ap.add_argument("--seqlens", default="1024,4096,16384", help="sequence lengths")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (order flipped each)")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per build and round")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds: no row starts past it")
    return ap.parse_args(argv)


def main(argv):
    a = parse(argv)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashbuild import api
    from flashbuild.pipeline import loader

    builds, modules = {}, {}
    for spec in a.build:
        name, path = spec.split("=", 1)
        p = pathlib.Path(path)
        module = p.name.split(".")[0]
        # Two builds of one selection from two trees have the same key, so the same module name and op
        # namespace: the second would run the first's kernels. A distinct nvcc flag (-DFLASHBUILD_AB_TAG=...)
        # gives a build its own key.
        if module in modules:
            sys.exit(f"builds {modules[module]} and {name} are both {module}: give one a distinct --nvcc-flag")
        modules[module] = name
        builds[name] = api.wrap(loader.load_extension(p, module))
    only = {}
    for spec in a.only:
        name, rule = spec.split("=", 1)
        only.setdefault(name, set()).add(rule)
    same = []
    for spec in a.same:
        x, y = spec.split("=", 1)
        y, _, h = y.partition(":")
        same.append((x, y, int(h) if h else None))
    names = list(builds)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    # Clocks up before the first row (the card idles at a few hundred MHz): about a second of matrix products.
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    for _ in range(80):
        x @ x
    torch.cuda.synchronize()
    rows, skipped, t0 = [], [], time.time()
    for hdim in map(int, a.hdim.split(",")):
        for dt in a.dtype.split(","):
            for causal in (True, False):
                for seqlen in map(int, a.seqlens.split(",")):
                    key = f"{hdim}:{'causal' if causal else 'plain'}"
                    here = [n for n in names if n not in only or key in only[n]]
                    label = f"fwd_hdim{hdim}_{dt}{'_causal' if causal else ''}"
                    if time.time() - t0 > a.budget:
                        skipped.append(f"{label} {seqlen}")
                        continue
                    rows.append(measure(torch, sdpa_kernel, SDPBackend, builds, here, same, label, hdim, dt, causal,
                                        seqlen, a, l2))
                    r = rows[-1]
                    print(f"  {label} {seqlen}: " + " ".join(f"{n} {r['tflops'][n]:.1f}" for n in r["tflops"]),
                          flush=True)
    (out / "ab.json").write_text(json.dumps({"builds": a.build, "rows": rows, "skipped": skipped,
                                             "device": torch.cuda.get_device_name()}, indent=1))
    base = names[0]
    print(f"{'variant':<26} {'seqlen':>6} " + " ".join(f"{n + ' TF':>9}" for n in names + ["cudnn"])
          + " " + " ".join(f"{n + '/' + base:>22}" for n in names[1:]) + " " + " ".join(f"{n + '/cuDNN':>10}" for n in names))
    for r in rows:
        line = f"{r['variant']:<26} {r['seqlen']:>6} "
        line += " ".join(f"{r['tflops'][n]:>9.1f}" if n in r["tflops"] else f"{'-':>9}" for n in names + ["cudnn"])
        for n in names[1:]:
            if n in r["ratio"]:
                per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"][n])
                line += f" {r['ratio'][n]:.3f} ({per})"
            else:
                line += f" {'-':>22}"
        line += " " + " ".join(f"{r['tflops'][n] / r['tflops']['cudnn']:>10.3f}" if n in r["tflops"] else f"{'-':>10}"
                               for n in names)
        print(line)
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")


def measure(torch, sdpa_kernel, SDPBackend, builds, here, same, label, hdim, dt, causal, seqlen, a, l2):
    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 4
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)
    sets = [[torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(n_sets)]
    sdpa_sets = [[t.transpose(1, 2) for t in s] for s in sets]  # SDPA's (batch, heads, seqlen, hdim) views

    def call(n, i):
        if n == "cudnn":
            q, k, v = sdpa_sets[i % n_sets]
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        q, k, v = sets[i % n_sets]
        return builds[n].flash_attn_func(q, k, v, causal=causal)

    outs = {n: call(n, 0) for n in here + ["cudnn"]}
    ref = outs["cudnn"].transpose(1, 2).float()
    err = {n: float((outs[n].float() - ref).norm() / ref.norm()) for n in here}
    for x, y, h in same:
        if x in here and y in here and h in (None, hdim) and not torch.equal(outs[x], outs[y]):
            print(f"MISMATCH {label} {seqlen}: builds {x} and {y} should give the same bits and do not", flush=True)
    for n, e in err.items():
        if not e < 1e-2:
            print(f"ERROR {label} {seqlen}: build {n} is {e:.2e} from cuDNN (relative norm)", flush=True)
    order0 = here + ["cudnn"]
    for i in range(3):
        for n in order0:
            call(n, i)
    ms = {n: [] for n in order0}
    for rnd in range(a.rounds):
        order = order0 if rnd % 2 == 0 else order0[::-1]
        ev = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
              for n in order}
        # A head start for the queue: a short call (0.1-0.2 ms at 1k) takes about as long to launch from Python,
        # and an event recorded on an idle GPU would time the launch too.
        torch.cuda._sleep(50_000_000)
        for i in range(a.reps):
            for j, n in enumerate(order):
                start, end = ev[n][i]
                start.record()
                call(n, i * len(order) + j)
                end.record()
        torch.cuda.synchronize()
        for n in order:
            ms[n].append(statistics.median(x.elapsed_time(y) for x, y in ev[n]))
    flops = 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
    med = {n: statistics.median(v) for n, v in ms.items()}
    base = here[0]
    return {"variant": label, "seqlen": seqlen, "batch": batch, "nheads": nheads, "ms_rounds": ms, "err_vs_cudnn": err,
            "tflops": {n: flops / med[n] / 1e9 for n in order0},
            "ratio_rounds": {n: [b / x for b, x in zip(ms[base], ms[n])] for n in here[1:]},
            "ratio": {n: med[base] / med[n] for n in here[1:]}}


if __name__ == "__main__":
    main(sys.argv[1:])
