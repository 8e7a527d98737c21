"""The Hopper backward with its causal masked steps peeled (new: at hdim 96; peel2: every causal tile) against
the one loop (base, nvcc -DFLASHBUILD_HOPPER_BWD_PEEL=0), builds of one tree, A/B-timed in one process.

Before timing, per head dim and dtype: the two builds' gradients on odd shapes (dense causal, seqlen_q below,
equal to and above seqlen_k, GQA/MQA, one query row; packed sequences of 1 to 1023 rows) in deterministic mode
must be bitwise equal (dQ's adds in a fixed order, so any difference is the kernel's), and the default mode's
within --tol. Then per (hdim, dtype, causal, seqlen) row: both arms' dQ, dK, dV compared (max abs difference;
above --tol or NaN: the row is not timed, exit 1 at the end); the arms in turns, one mha_bwd call each per rep
between CUDA events, the order flipped every round, inputs rotated past twice L2; the problem as `flashbuild
bench`'s (16k tokens, model dim 2048; out and LSE from the fp32 reference; causal FLOPs halved). Prints each row's
TFLOPS, the per-round and median ratio new / base, writes OUT/ab.json.

    python3 benchmarks/hopper_bwd_peel/ab.py --out OUT [--plan study|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_peel/ab.py --print-builds   # `name flashbuild-arguments`, one line a build (run.sh)
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import pathlib
import statistics
import sys
import time

TOKENS, MODEL_DIM = 16384, 2048  # benchmarks/README.md, "How numbers are measured"
PEEL0, PEEL2 = ["-DFLASHBUILD_HOPPER_BWD_PEEL=0"], ["-DFLASHBUILD_HOPPER_BWD_PEEL=2"]
# Arm -> its selections (flashbuild.load keywords beyond direction/arch/features, nvcc flags):
#   base   the one loop testing needs_mask every step (PEEL=0): the kernel before this study
#   new    the default: masked steps peeled at head dim 96 only (elsewhere the base kernel)
#   peel2  peeled at every causal tile (PEEL=2); at 64 and 128 ptxas spills
# The non-causal kernels are the same code in every arm: their rows are the control. The first run
# (results/h200-1, the tree at aa5d6c2) had peeled 96, 192 and 256 by default: its `new` at 192/256 is `peel2` here.
BUILDS = {
    "base": [(dict(hdim="64,128", dtype="fp16", causal="on"), PEEL0),
             (dict(hdim="96,192,256", dtype="fp16", causal="both"), PEEL0),
             (dict(hdim="96,192", dtype="bf16", causal="on"), PEEL0)],
    "new": [(dict(hdim="64,96,128,192,256", dtype="fp16", causal="both"), []),
            (dict(hdim="96,192", dtype="bf16", causal="on"), [])],
    "peel2": [(dict(hdim="64,128,192,256", dtype="fp16", causal="on"), PEEL2),
              (dict(hdim="192", dtype="bf16", causal="on"), PEEL2)],
}


def plan_rows(plan):
    """(hdim, dtype, causal, seqlen, arms), the base arm first; ordered so that a cut budget loses the rows
    needed least."""
    seqlens = (1024, 4096, 16384)
    if plan == "smoke":
        return [(96, "fp16", True, 4096, ["base", "new"])]
    rows = [(96, "fp16", True, s, ["base", "new"]) for s in seqlens]
    rows += [(h, "fp16", True, s, ["base", "peel2"]) for h in (192, 256, 64, 128) for s in seqlens]
    rows += [(h, "fp16", False, 16384, ["base", "new"]) for h in (96, 192, 256)]
    rows += [(96, "bf16", True, s, ["base", "new"]) for s in (4096, 16384)]
    rows += [(192, "bf16", True, s, ["base", "peel2"]) for s in (4096, 16384)]
    return rows


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for ab.json (created)")
    ap.add_argument("--plan", default="study", choices=["study", "smoke"], help="which rows")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the arms' order flips each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per arm and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds after loading: no new row starts past it (rows left are listed)")
    ap.add_argument("--tol", type=float, default=2e-3, help="largest |grad - base grad| accepted (default mode)")
    ap.add_argument("--print-builds", action="store_true",
                    help="print each build as `name flashbuild-arguments` (run.sh builds them) and exit")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for a build not yet cached")
    a = ap.parse_args(argv)
    if not a.print_builds and not a.out:
        ap.error("--out is required (or --print-builds)")
    return a


def main(argv):
    a = parse(argv)
    if a.print_builds:
        for name, sels in BUILDS.items():
            for i, (kw, flags) in enumerate(sels):
                print(f"{name}{i}", f"--hdim {kw['hdim']} --dtype {kw['dtype']} --causal {kw['causal']}",
                      " ".join(f"--nvcc-flag={f}" for f in flags))
        return
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    loaded = {(arm, i): flashbuild.load(direction="bwd", arch="sm90", features=[], nvcc_flags=flags, jobs=a.jobs, **kw)
              for arm, sels in BUILDS.items() for i, (kw, flags) in enumerate(sels)}
    print(f"loaded {len(loaded)} builds in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)

    def mod(arm, hdim, dt, causal):
        """The arm's build that holds (hdim, dt, causal)."""
        for i, (kw, _) in enumerate(BUILDS[arm]):
            causal_ok = kw["causal"] in ("both", "on" if causal else "off")
            if str(hdim) in kw["hdim"].split(",") and kw["dtype"] == dt and causal_ok:
                return loaded[(arm, i)]
        raise LookupError(f"no {arm} build holds hdim {hdim} {dt} causal={causal}")

    bad = []
    checks = []
    for hdim, dt, arm in sorted({(h, d, arms[1]) for h, d, c, _, arms in plan_rows(a.plan) if c}):
        for c in equivalence(torch, mod("base", hdim, dt, True), mod(arm, hdim, dt, True), hdim, dt, a.tol):
            c["arm"] = arm
            checks.append(c)
            if not c["ok"]:
                bad.append(f"check {c}")
                print(f"  CHECK FAILED {c}", flush=True)
    print(f"equivalence: {sum(c['ok'] for c in checks)} of {len(checks)} checks passed "
          "(deterministic: dq, dk, dv bitwise equal; default: within --tol)", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped = [], []
    for hdim, dt, causal, seqlen, arms in plan_rows(a.plan):
        name = f"bwd_hdim{hdim}_{dt}" + ("_causal" if causal else "")
        if time.time() - t0 > a.budget:
            skipped.append(f"{name} {seqlen}")
            continue
        r = measure(torch, {s: mod(s, hdim, dt, causal) for s in arms}, arms, hdim, dt, causal, seqlen, a, l2)
        r["variant"] = name
        rows.append(r)
        if r.get("error"):
            bad.append(f"{name} {seqlen}: {r['error']}")
            print(f"  {name} {seqlen}: {r['error']}", flush=True)
            continue
        print(f"  {name} {seqlen}: base {r['tflops']['base']:.1f} {arms[1]} {r['tflops'][arms[1]]:.1f} "
              f"ratio {r['ratio']:.3f} maxdiff {r['maxdiff']:.1e} dk/dv equal {r['dkdv_equal']}", flush=True)
    (out_dir / "ab.json").write_text(json.dumps({"rows": rows, "checks": checks, "skipped": skipped, "bad": bad,
                                                 "builds": BUILDS, "plan": a.plan,
                                                 "device": torch.cuda.get_device_name()}, indent=1))
    print(f"{'variant':<24} {'seqlen':>6} {'arm':>6} {'base':>7} {'arm':>7} {'arm / base per round':>22} "
          f"{'arm / base':>10}")
    for r in rows:
        if r.get("error"):
            continue
        per = " ".join(f"{x:.3f}" for x in r["ratio_rounds"])
        arm = r["arms"][1]
        print(f"{r['variant']:<24} {r['seqlen']:>6} {arm:>6} {r['tflops']['base']:>7.1f} {r['tflops'][arm]:>7.1f} "
              f"{per:>22} {r['ratio']:>10.3f}")
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")
    if bad:
        print("FAILED: " + "; ".join(bad))
        sys.exit(1)


def grads(mod, args, deterministic, varlen=False):
    fn = mod.mha_varlen_bwd if varlen else mod.mha_bwd
    kw = dict(deterministic=True) if deterministic else {}
    dq, dk, dv = fn(*args, causal=True, **kw)[:3]
    return dq, dk, dv


def equivalence(torch, base, new, hdim, dt, tol):
    """base and new on odd causal shapes: deterministic bitwise, default within tol. out random, LSE from a
    plain softmax of the scores (finite, rows' P summing near 1), so every P and dS is a real number."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    g = torch.Generator(device="cuda").manual_seed(hdim)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)  # noqa: E731
    out = []
    # (batch, seqlen_q, seqlen_k, nheads, nheads_k): misaligned, bottom-right aligned both ways, GQA / MQA,
    # a block-multiple, one query row, keys fewer than one key block.
    for b, sq, sk, h, hk in ((2, 1000, 1000, 4, 4), (1, 777, 1500, 4, 2), (1, 1500, 777, 4, 1), (2, 640, 640, 2, 2),
                             (3, 1, 300, 2, 2), (1, 300, 64, 2, 2), (1, 64, 300, 2, 2), (1, 129, 257, 2, 2)):
        q, k, v = rnd(b, sq, h, hdim), rnd(b, sk, hk, hdim), rnd(b, sk, hk, hdim)
        o, do = rnd(b, sq, h, hdim), rnd(b, sq, h, hdim)
        lse = torch.rand(b, h, sq, device="cuda", generator=g) * 2 + math.log(max(sk, 2))
        args = (do, q, k, v, o, lse)
        out.append(compare(torch, base, new, args, f"dense b{b} sq{sq} sk{sk} h{h}/{hk}", tol, False))
    # Packed sequences (mha_varlen_bwd): lengths that end inside a block, one row / one key, an empty one.
    sq, sk = [1, 17, 113, 1023, 64, 300, 0], [5, 300, 113, 900, 200, 64, 7]
    h, hk = 4, 2
    cu = lambda xs: torch.tensor([0, *itertools.accumulate(xs)], device="cuda", dtype=torch.int32)  # noqa: E731
    q, k, v = rnd(sum(sq), h, hdim), rnd(sum(sk), hk, hdim), rnd(sum(sk), hk, hdim)
    o, do = rnd(sum(sq), h, hdim), rnd(sum(sq), h, hdim)
    lse = torch.rand(h, sum(sq), device="cuda", generator=g) * 2 + math.log(1000)
    args = (do, q, k, v, o, lse, cu(sq), cu(sk), max(sq), max(sk))
    out.append(compare(torch, base, new, args, f"varlen q{sq} k{sk} h{h}/{hk}", tol, True))
    for c in out:
        c.update(hdim=hdim, dtype=dt)
    return out


def compare(torch, base, new, args, what, tol, varlen):
    det = [grads(m, args, True, varlen) for m in (base, new, new)]
    equal = all(torch.equal(x, y) for x, y in zip(det[0], det[1]))
    repeat = all(torch.equal(x, y) for x, y in zip(det[1], det[2]))
    fin = all(torch.isfinite(x).all().item() for x in det[1])
    dflt = [grads(m, args, False, varlen) for m in (base, new)]
    diff = max((x.float() - y.float()).abs().max().item() if x.numel() else 0.0 for x, y in zip(*dflt))
    ok = equal and repeat and fin and math.isfinite(diff) and diff <= tol
    return {"shape": what, "deterministic_equal": equal, "deterministic_repeat": repeat, "finite": fin,
            "default_maxdiff": diff, "ok": ok}


def measure(torch, m, arms, hdim, dt, causal, seqlen, a, l2):
    from flashbuild.debug.bench import _reference_out_lse

    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 5  # q, k, v, out, dout
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets = []
    for _ in range(n_sets):
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(4))
        o, lse = _reference_out_lse(q, k, v, causal)
        sets.append((do, q, k, v, o, lse))
    def call(arm, i):
        return m[arm].mha_bwd(*sets[i % n_sets], causal=causal)

    row = {"hdim": hdim, "dtype": dt, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads,
           "arms": arms}
    gb, gn = call(arms[0], 0)[:3], call(arms[1], 0)[:3]
    d = max((x.float() - y.float()).abs().max().item() for x, y in zip(gb, gn))
    row["maxdiff"] = d
    if not math.isfinite(d) or d > a.tol or not all(torch.isfinite(x).all() for x in gn):
        row["error"] = f"{arms[1]} differs from base by {d:.3e} (NaN/inf or past --tol {a.tol})"
        return row
    row["dkdv_equal"] = bool(torch.equal(gb[1], gn[1]) and torch.equal(gb[2], gn[2]))
    del gb, gn
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
    flops = 2.5 * 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)  # bwd: 2.5x the forward's
    med = {s: statistics.median(ms[s]) for s in arms}
    row.update({"ms_rounds": ms, "tflops": {s: flops / med[s] / 1e9 for s in arms},
                "ratio_rounds": [b / x for b, x in zip(ms[arms[0]], ms[arms[1]])],
                "ratio": med[arms[0]] / med[arms[1]]})
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
