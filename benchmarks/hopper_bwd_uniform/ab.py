"""The Hopper backward's kKeys step (head dims 64 and 128) in study forms (kernels/hopper/bwd_mainloop.h), builds of
one tree selected by nvcc defines, A/B-timed in one process against main's step (base: -DFLASHBUILD_HOPPER_BWD_STATS=0,
which compiles to main's SASS at 4b300f3; the default differs from it in the non-causal hdim-64 kernel), with PyTorch
SDPA's cuDNN backend in the same turns. Arms (PLANS; run h200-1 ran plan `first`'s kernels on the tree at 43cadad,
whose ab.py called the plan `study`, whose default was the `new` step and whose base was built with
-DFLASHBUILD_HOPPER_BWD_UNIFORM_WG=0 -DFLASHBUILD_HOPPER_BWD_STATS=0: its ab.json names the flags):
  unif   -DFLASHBUILD_HOPPER_BWD_UNIFORM_WG=1: the wgmma descriptors built in uniform registers
  new    unif and the LSE / dsum in registers (hdim 64 shuffled, FLASHBUILD_HOPPER_BWD_STATS=2; hdim 128 one
         register per row, =1)
  shfl   the LSE / dsum shuffled (=2) at both head dims, descriptors as base
  regs   the LSE / dsum one register per row (=1) at hdim 128, descriptors as base

Before timing, per head dim and dtype: every arm's gradients on odd shapes (dense, causal or not: seqlen_q below,
equal to and above seqlen_k, GQA/MQA, one query row; packed sequences of 1 to 1023 rows, one empty) in
deterministic mode must be bitwise equal to base's (dQ's adds in a fixed order, so any difference is the
kernel's) and to a second deterministic run of the arm, and the default mode's within --tol. Then per (hdim,
dtype, causal, seqlen) row: every arm's dQ, dK, dV against base's (above --tol or NaN: the row is not timed,
exit 1 at the end); the arms and cuDNN in turns, one call each per rep between CUDA events, the order reversed
every round, inputs rotated past twice L2; the problem as `flashbuild bench`'s (16k tokens, model dim 2048; out
and LSE from the fp32 reference; FLOPs 2.5x the forward's, halved causal). Prints each row's TFLOPS and the
median over rounds of arm / base, writes OUT/ab.json, the table last.

    python3 benchmarks/hopper_bwd_uniform/ab.py --out OUT [--plan study|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_uniform/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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
# The builds' features and what every call passes besides causal (a study sets them: ../hopper_bwd_lpt/ab.py softcap).
FEATURES: list = []
CALL_KW: dict = {}
D = "-DFLASHBUILD_HOPPER_BWD_"
FP16 = dict(dtype="fp16", causal="both")
# Plan -> arm -> its selections (flashbuild.load keywords beyond direction/arch/features, nvcc flags).
PLANS = {
    "first": {  # run h200-1's kernels
        "base": [(dict(hdim="64,128", dtype="fp16,bf16", causal="both"), [f"{D}STATS=0"])],
        "unif": [(dict(hdim="64,128", **FP16), [f"{D}UNIFORM_WG=1", f"{D}STATS=0"])],
        "new": [(dict(hdim="64", dtype="fp16,bf16", causal="both"), [f"{D}UNIFORM_WG=1", f"{D}STATS=2"]),
                (dict(hdim="128", dtype="fp16,bf16", causal="both"), [f"{D}UNIFORM_WG=1", f"{D}STATS=1"])],
    },
    "stats": {  # run h200-2's kernels: the stats forms alone
        "base": [(dict(hdim="64,128", **FP16), [f"{D}STATS=0"])],
        "shfl": [(dict(hdim="64,128", **FP16), [f"{D}STATS=2"])],
        "regs": [(dict(hdim="128", **FP16), [f"{D}STATS=1"])],
    },
}
CUDNN = "cudnn"  # PyTorch SDPA's cuDNN backend, timed in the same turns (not an arm: no checks against base)


def plan_rows(plan):
    """(hdim, dtype, causal, seqlen, arms), base first; ordered so that a cut budget loses the rows needed least."""
    rows = []
    if plan == "first":
        for seqlen in (16384, 4096, 1024):
            for hdim in (64, 128):
                rows += [(hdim, "fp16", causal, seqlen, ["base", "unif", "new"]) for causal in (False, True)]
        rows += [(h, "bf16", c, s, ["base", "new"]) for s in (16384, 4096) for h in (64, 128) for c in (False, True)]
    elif plan == "stats":
        for seqlen in (16384, 4096, 1024):
            for hdim in (64, 128):
                arms = ["base", "shfl"] + (["regs"] if hdim == 128 else [])
                rows += [(hdim, "fp16", causal, seqlen, arms) for causal in (False, True)]
    else:  # smoke
        rows = [(64, "fp16", False, 4096, ["base", "shfl"])]
    return rows


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for ab.json (created)")
    ap.add_argument("--plan", default="stats", choices=["first", "stats", "smoke"],
                    help="which arms and rows (PLANS; smoke: one row of plan stats)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per row (the order reverses each)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per arm and round (after a warm-up)")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds after the checks: no new row starts past it (rows left are listed)")
    ap.add_argument("--tol", type=float, default=2e-3,
                    help="largest |grad - base grad| accepted (default mode), plus 2 ulp of |base grad| in its dtype")
    ap.add_argument("--print-builds", action="store_true",
                    help="print each build as `name flashbuild-arguments` and exit (run.sh builds them)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc jobs for a build not yet cached")
    a = ap.parse_args(argv)
    if not a.print_builds and not a.out:
        ap.error("--out is required (or --print-builds)")
    if a.rounds < 1 or a.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    return a



def refuse_without_form(argv, study: str, present: bool, form: str, last_commit: str,
                        why: str = "it was timed, did not pay") -> None:
    """A study whose form was timed, did not pay and was taken out of main: on a tree without the form (present
    False) stop (exit 2) before any build, naming the last commit that has it, since its arms would build the defaults
    under other names; --help and --print-builds still answer."""
    if present or {"-h", "--help", "--print-builds"} & set(argv):
        return
    print(f"ab.py: this tree has no {form}: {why} (benchmarks/{study}/README.md) and was taken out "
          f"of main. Run it from the last commit that has it: git worktree add /tmp/{study} {last_commit} && "
          f"cd /tmp/{study} && python3 benchmarks/{study}/ab.py ...", file=sys.stderr)
    sys.exit(2)

def main(argv):
    a = parse(argv)
    builds = PLANS["stats" if a.plan == "smoke" else a.plan]
    if a.print_builds:
        for name, sels in builds.items():
            for i, (kw, flags) in enumerate(sels):
                print(f"{name}{i}", f"--hdim {kw['hdim']} --dtype {kw['dtype']} --causal {kw['causal']}",
                      " ".join(f"--nvcc-flag={f}" for f in flags))
        return
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild

    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    loaded = {(arm, i): flashbuild.load(direction="bwd", arch="sm90", features=FEATURES, nvcc_flags=flags, jobs=a.jobs, **kw)
              for arm, sels in builds.items() for i, (kw, flags) in enumerate(sels)}
    print(f"loaded {len(loaded)} builds in {time.time() - t0:.1f} s; {torch.cuda.get_device_name()}", flush=True)

    def mod(arm, hdim, dt, causal):
        """The arm's build that holds (hdim, dt, causal)."""
        for i, (kw, _) in enumerate(builds[arm]):
            causal_ok = kw["causal"] in ("both", "on" if causal else "off")
            if str(hdim) in kw["hdim"].split(",") and dt in kw["dtype"].split(",") and causal_ok:
                return loaded[(arm, i)]
        raise LookupError(f"no {arm} build holds hdim {hdim} {dt} causal={causal}")

    bad, checks = [], []
    rows_planned = plan_rows(a.plan)
    for hdim, dt, arm in sorted({(h, d, arm) for h, d, _, _, arms in rows_planned for arm in arms[1:]}):
        for causal in (False, True):
            for c in equivalence(torch, mod("base", hdim, dt, causal), mod(arm, hdim, dt, causal), hdim, dt, causal,
                                 a.tol):
                c["arm"] = arm
                checks.append(c)
                if not c["ok"]:
                    bad.append(f"check {c}")
                    print(f"  CHECK FAILED {c}", flush=True)
    print(f"equivalence: {sum(c['ok'] for c in checks)} of {len(checks)} checks passed "
          "(deterministic: dq, dk, dv bitwise equal to base's and to a second run; default: within --tol)", flush=True)
    t0 = time.time()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    rows, skipped = [], []
    for hdim, dt, causal, seqlen, arms in rows_planned:
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
        print(f"  {name} {seqlen}: " + " ".join(f"{s} {r['tflops'][s]:.1f}" for s in [*arms, CUDNN]
                                                if s in r["tflops"])
              + " | " + " ".join(f"{s}/base {r['ratio'][s]:.3f}" for s in arms[1:])
              + f" maxdiff {r['maxdiff']:.1e}", flush=True)
    (out_dir / "ab.json").write_text(json.dumps({"rows": rows, "checks": checks, "skipped": skipped, "bad": bad,
                                                 "builds": builds, "plan": a.plan, "rounds": a.rounds,
                                                 "reps": a.reps, "device": torch.cuda.get_device_name()},
                                                indent=1))
    print_table(rows)
    if skipped:
        print(f"budget: not timed: {', '.join(skipped)}")
    if bad:
        print("FAILED: " + "; ".join(bad))
        sys.exit(1)


def print_table(rows):
    """The rows: TFLOPS of base and cuDNN, each arm's median ratio to base (its per-round ratios after it), and the
    best arm's ratio to cuDNN."""
    arms = list(dict.fromkeys(arm for r in rows if not r.get("error") for arm in r["arms"][1:]))
    print(f"{'variant':<24} {'seqlen':>6} {'base':>7} {'cudnn':>7} "
          + " ".join(f"{arm + '/base':>22}" for arm in arms) + f" {'base/cudnn':>10}")
    for r in rows:
        if r.get("error"):
            continue
        cells = []
        for arm in arms:
            if arm in r["ratio"]:
                per = "/".join(f"{x:.3f}" for x in r["ratio_rounds"][arm])
                cells.append(f"{r['ratio'][arm]:.3f} ({per})")
            else:
                cells.append("-")
        cud = r["tflops"].get(CUDNN)
        vs = f"{r['tflops']['base'] / cud:.3f}" if cud else "n/a"
        print(f"{r['variant']:<24} {r['seqlen']:>6} {r['tflops']['base']:>7.1f} {(cud or float('nan')):>7.1f} "
              + " ".join(f"{c:>22}" for c in cells) + f" {vs:>10}")


def grads(mod, args, causal, deterministic, varlen=False):
    fn = mod.mha_varlen_bwd if varlen else mod.mha_bwd
    kw = dict(deterministic=True) if deterministic else {}
    dq, dk, dv = fn(*args, causal=causal, **kw, **CALL_KW)[:3]
    return dq, dk, dv


def equivalence(torch, base, new, hdim, dt, causal, tol):
    """base and new on odd shapes: deterministic bitwise, default within tol. out random, LSE finite and near a
    real softmax's (log of the key count plus [0, 2)), so every P and dS is a real number."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    g = torch.Generator(device="cuda").manual_seed(hdim + causal)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)  # noqa: E731
    out = []
    # (batch, seqlen_q, seqlen_k, nheads, nheads_k): misaligned, bottom-right aligned both ways, GQA / MQA,
    # a block-multiple, one query row, keys fewer than one key block.
    for b, sq, sk, h, hk in ((2, 1000, 1000, 4, 4), (1, 777, 1500, 4, 2), (1, 1500, 777, 4, 1), (2, 640, 640, 2, 2),
                             (3, 1, 300, 2, 2), (1, 300, 64, 2, 2), (1, 64, 300, 2, 2), (1, 129, 257, 2, 2)):
        q, k, v = rnd(b, sq, h, hdim), rnd(b, sk, hk, hdim), rnd(b, sk, hk, hdim)
        o, do = rnd(b, sq, h, hdim), rnd(b, sq, h, hdim)
        lse = torch.rand(b, h, sq, device="cuda", generator=g) * 2 + math.log(max(sk, 2))
        out.append(compare(torch, base, new, (do, q, k, v, o, lse), f"dense b{b} sq{sq} sk{sk} h{h}/{hk}", causal, tol,
                           False))
    # Packed sequences (mha_varlen_bwd): lengths that end inside a block, one row / one key, an empty one.
    sq, sk = [1, 17, 113, 1023, 64, 300, 0], [5, 300, 113, 900, 200, 64, 7]
    h, hk = 4, 2
    cu = lambda xs: torch.tensor([0, *itertools.accumulate(xs)], device="cuda", dtype=torch.int32)  # noqa: E731
    q, k, v = rnd(sum(sq), h, hdim), rnd(sum(sk), hk, hdim), rnd(sum(sk), hk, hdim)
    o, do = rnd(sum(sq), h, hdim), rnd(sum(sq), h, hdim)
    lse = torch.rand(h, sum(sq), device="cuda", generator=g) * 2 + math.log(1000)
    args = (do, q, k, v, o, lse, cu(sq), cu(sk), max(sq), max(sk))
    out.append(compare(torch, base, new, args, f"varlen q{sq} k{sk} h{h}/{hk}", causal, tol, True))
    for c in out:
        c.update(hdim=hdim, dtype=dt, causal=causal)
    return out


def within(torch, base_grads, new_grads, tol):
    """Default mode (dQ's atomic adds in any order): every |new - base| <= tol + 2 ulp of |base| in the gradients'
    dtype. A flat tol alone fails bf16 on one ulp of a gradient near 1 (0.0039 > 2e-3, run h200-1 of
    ../hopper_bwd_dkv_tma while the deterministic gradients were bitwise equal)."""
    for x, y in zip(base_grads, new_grads):
        if not x.numel():
            continue
        eps = torch.finfo(x.dtype).eps
        if not bool(((y.float() - x.float()).abs() <= tol + 2 * eps * x.float().abs()).all()):
            return False
    return True


def compare(torch, base, new, args, what, causal, tol, varlen):
    det = [grads(m, args, causal, True, varlen) for m in (base, new, new)]
    equal = all(torch.equal(x, y) for x, y in zip(det[0], det[1]))
    repeat = all(torch.equal(x, y) for x, y in zip(det[1], det[2]))
    fin = all(torch.isfinite(x).all().item() for x in det[1])
    dflt = [grads(m, args, causal, False, varlen) for m in (base, new)]
    diff = max((x.float() - y.float()).abs().max().item() if x.numel() else 0.0 for x, y in zip(*dflt))
    ok = equal and repeat and fin and math.isfinite(diff) and within(torch, dflt[0], dflt[1], tol)
    return {"shape": what, "deterministic_equal": equal, "deterministic_repeat": repeat, "finite": fin,
            "default_maxdiff": diff, "ok": ok}


def measure(torch, m, arms, hdim, dt, causal, seqlen, a, l2):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashbuild.debug.bench import _reference_out_lse

    batch, nheads = max(1, TOKENS // seqlen), MODEL_DIM // hdim
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
    shape = (batch, seqlen, nheads, hdim)
    per_set = batch * seqlen * nheads * hdim * 2 * 5  # q, k, v, out, dout
    n_sets = max(2, math.ceil(2 * l2 / per_set) + 1)  # together past twice L2, as `flashbuild bench` rotates
    sets, graphs = [], []
    for _ in range(n_sets):
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(4))
        o, lse = _reference_out_lse(q, k, v, causal)
        sets.append((do, q, k, v, o, lse))
        # SDPA takes (batch, nheads, seqlen, head_dim); seqlen_q == seqlen_k, so its top-left causal mask is ours.
        leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            so = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        graphs.append((so, leaves, do.transpose(1, 2).contiguous()))

    def call(arm, i):
        if arm == CUDNN:
            so, leaves, sdo = graphs[i % n_sets]
            return torch.autograd.grad(so, leaves, sdo, retain_graph=True)
        return m[arm].mha_bwd(*sets[i % n_sets], causal=causal, **CALL_KW)

    row = {"hdim": hdim, "dtype": dt, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads,
           "arms": arms}
    gb = call(arms[0], 0)[:3]
    diffs = {}
    for s in arms[1:]:
        gn = call(s, 0)[:3]
        diffs[s] = max((x.float() - y.float()).abs().max().item() for x, y in zip(gb, gn))
        finite = all(torch.isfinite(x).all() for x in gn)
        if not math.isfinite(diffs[s]) or not within(torch, gb, gn, a.tol) or not finite:
            row["error"] = f"{s} differs from base by {diffs[s]:.3e} (NaN/inf or past --tol {a.tol} + 2 ulp)"
            return row
    row["maxdiff"] = max(diffs.values(), default=0.0)
    del gb
    timed = [*arms, CUDNN]
    try:
        for i in range(3):
            call(CUDNN, i)
    except RuntimeError as exc:  # cuDNN refuses the shape: the arms are timed without it
        row["cudnn_error"] = str(exc).splitlines()[0]
        timed = list(arms)
    for i in range(3):
        for s in arms:
            call(s, i)
    ms = {s: [] for s in timed}
    for rnd in range(a.rounds):
        order = timed if rnd % 2 == 0 else timed[::-1]
        ev = {s: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
              for s in timed}
        for i in range(a.reps):
            for j, s in enumerate(order):
                start, end = ev[s][i]
                start.record()
                call(s, i * len(order) + j)  # never the inputs the call before read (L2)
                end.record()
        torch.cuda.synchronize()
        for s in timed:
            ms[s].append(statistics.median(x.elapsed_time(y) for x, y in ev[s]))
    flops = 2.5 * 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)  # bwd: 2.5x the forward's
    med = {s: statistics.median(ms[s]) for s in timed}
    row.update({"ms_rounds": ms, "tflops": {s: flops / med[s] / 1e9 for s in timed},
                "ratio_rounds": {s: [b / x for b, x in zip(ms["base"], ms[s])] for s in arms[1:]},
                "ratio": {s: statistics.median(b / x for b, x in zip(ms["base"], ms[s])) for s in arms[1:]}})
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
