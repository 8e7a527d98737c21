"""A timeline of the Hopper backward's CTAs: where a CTA's fixed cost goes (issue 46; README.md beside says why).

Usage:
    python3 benchmarks/bwd_timeline/timeline.py [--hdims 64,128] [--seqlens 4096,16384] [--causal off,on]
                                                [--calls 3] [--dtype fp16] [--json out.json] [--nvcc-flag F]

Loads the backward build with -DFLASHBUILD_SPLITKV_TIMELINE=1 (kernels/hopper/bwd_kernel.h, BwdTimeline: each CTA
writes %globaltimer at its entry, around its consumers' main loop, after its dK / dV stores, and as its dQ writer warp
and its producer warp leave, with its SM, key block, head, batch and query-block count) and calls mha_bwd as
`flashbuild bench` shapes it: 16k tokens (batch = 16384 / seqlen), 2048 / hdim heads, random inputs, O and the LSE
of the reference forward (as ../hopper_bwd_uniform/ab.py). Each row runs 2 unrecorded calls, then --calls recorded
ones back to back. Per call (medians over its CTAs, then over the calls, µs):
  pre     entry to the consumers' main loop (barrier set-up, register reallocation)
  loop    the main loop, fitted as fixed + per_step x query blocks by least squares over the call's CTAs (causal
          calls give CTAs of many lengths; a non-causal call's CTAs all have one, so its fixed part is not separable
          and is reported with the step from the causal call of the same head dim and length where there is one)
  dkv     the consumers' dK / dV epilogue
  tail    the end of the dK / dV stores to the CTA's last warp's end (the dQ writer's last reductions, the producer)
  gap     a CTA's end to the next CTA's entry on the same SM (the launch of the next one)
  fixed   pre + the loop's fixed part + dkv + tail + gap, in µs and in steps (fixed / per_step)
and from %clock64, which does not depend on the clock the card runs at: the main loop's GHz (cycles over ns), its
cycles a query block (the median over CTAs of loop cycles / blocks, and the fitted slope), the epilogue's cycles.
The raw records (ns, cycles) go to --json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics

FLAG = "-DFLASHBUILD_SPLITKV_TIMELINE=1"
VAR = "FLASHBUILD_SPLITKV_TIMELINE"  # <address>:<calls>:<ctas>:<tag>, read by the launch (common/timeline.h)
WORDS = 16  # kTimelineWords
CTAS = 16384  # a call's CTA capacity in the buffer
# Slots of a record (bwd_kernel.h, BwdTimeline::Slot)
ENTRY, MMA_START, MMA_END, DKV_END, WRITER_END, PRODUCER_END, WHERE, COORDS = range(8)
CLOCKS = 8  # CLOCKS + slot: %clock64 beside MMA_START, MMA_END and DKV_END


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--hdims", default="64,128", help="head dims (the Hopper backward's: 64, 96, 128, 192, 256)")
    ap.add_argument("--seqlens", default="4096,16384", help="sequence lengths (16k tokens a call)")
    ap.add_argument("--causal", default="off,on", help="off, on or both (comma list)")
    ap.add_argument("--calls", type=int, default=3, help="recorded calls a row")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--json", default=None, help="write the raw records and the summaries here")
    ap.add_argument("--nvcc-flag", action="append", default=[], help="another nvcc flag for the build (repeatable)")
    a = ap.parse_args(argv)
    try:
        a.hdims = [int(x) for x in a.hdims.split(",")]
        a.seqlens = [int(x) for x in a.seqlens.split(",")]
    except ValueError:
        ap.error("--hdims and --seqlens take comma lists of integers")
    if any(h not in (64, 96, 128, 192, 256) for h in a.hdims):
        ap.error("--hdims: the Hopper backward serves 64, 96, 128, 192 and 256")
    if any(s < 128 or 16384 % s for s in a.seqlens):
        ap.error("--seqlens: lengths that divide 16384, from 128")
    a.causal = [{"off": False, "on": True}.get(c) for c in a.causal.split(",")]
    if None in a.causal:
        ap.error("--causal: off, on or off,on")
    if a.calls < 1:
        ap.error("--calls: at least 1")
    return a


def fit(xs, ys):
    """Least squares y = a + b x; (a, b), or (nan, nan) when the x do not vary."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return math.nan, math.nan
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def summarize(ctas: list[dict]) -> dict:
    """One call's CTAs -> its medians (µs) and its fit."""
    us = 1e-3
    pre = [(c["mma_start"] - c["entry"]) * us for c in ctas]
    loop = [(c["mma_end"] - c["mma_start"]) * us for c in ctas]
    dkv = [(c["dkv_end"] - c["mma_end"]) * us for c in ctas]
    tail = [(c["end"] - c["dkv_end"]) * us for c in ctas]
    gaps = []
    by_sm: dict[int, list[dict]] = {}
    for c in ctas:
        by_sm.setdefault(c["sm"], []).append(c)
    for row in by_sm.values():
        row.sort(key=lambda c: c["entry"])
        gaps += [(b["entry"] - a["end"]) * us for a, b in zip(row, row[1:])]
    fixed_loop, per_step = fit([c["blocks"] for c in ctas], loop)
    kcyc = [(c["clk_mma_end"] - c["clk_start"]) / 1e3 for c in ctas]  # the main loop in thousands of cycles
    fixed_kcyc, step_kcyc = fit([c["blocks"] for c in ctas], kcyc)
    loop_ghz = statistics.median([(c["clk_mma_end"] - c["clk_start"]) / (c["mma_end"] - c["mma_start"])
                                  for c in ctas if c["mma_end"] > c["mma_start"]])
    t0, t1 = min(c["entry"] for c in ctas), max(c["end"] for c in ctas)
    busy = sum(c["end"] - c["entry"] for c in ctas) / (len(by_sm) * (t1 - t0))
    med = statistics.median
    return {"ctas": len(ctas), "sms": len(by_sm), "span_us": (t1 - t0) * us, "busy": busy,
            "blocks_median": med([c["blocks"] for c in ctas]), "pre": med(pre), "loop": med(loop),
            "loop_fixed": fixed_loop, "per_step": per_step, "dkv": med(dkv), "tail": med(tail),
            "loop_kcycles": med(kcyc), "loop_fixed_kcycles": fixed_kcyc, "step_kcycles": step_kcyc,
            "step_kcycles_mean": med([k / c["blocks"] for k, c in zip(kcyc, ctas) if c["blocks"]]),
            "dkv_kcycles": med([(c["clk_dkv_end"] - c["clk_mma_end"]) / 1e3 for c in ctas]), "ghz": loop_ghz,
            "gap": med(gaps) if gaps else math.nan}


def decode(flat: list[int], call: int) -> list[dict]:
    out = []
    for b in range(CTAS):
        w = flat[(call * CTAS + b) * WORDS:(call * CTAS + b + 1) * WORDS]
        if w[ENTRY] == 0:
            continue
        coords = w[COORDS]
        out.append({"entry": w[ENTRY], "mma_start": w[MMA_START], "mma_end": w[MMA_END], "dkv_end": w[DKV_END],
                    "clk_start": w[CLOCKS + MMA_START], "clk_mma_end": w[CLOCKS + MMA_END],
                    "clk_dkv_end": w[CLOCKS + DKV_END],
                    "writer_end": w[WRITER_END], "producer_end": w[PRODUCER_END], "sm": w[WHERE] & 0xffffffff,
                    "n_block": coords & 0xffff, "head": (coords >> 16) & 0xffff, "batch": (coords >> 32) & 0xffff,
                    "blocks": (coords >> 48) & 0xffff,
                    "end": max(w[DKV_END], w[WRITER_END], w[PRODUCER_END])})  # the CTA's last warp's end
    return out


def main(argv=None):
    a = parse(argv)
    import torch  # after argparse: --help runs without a GPU or torch

    import flashbuild
    from flashbuild.debug.bench import _reference_out_lse

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    buf = torch.zeros(a.calls * CTAS * WORDS, dtype=torch.int64, device="cuda")
    report, raw = [], []
    print(f"{torch.cuda.get_device_name()}; {a.dtype}; medians over CTAs, then over {a.calls} calls; µs")
    print(f"{'hdim':>4} {'seqlen':>6} {'causal':>6} {'ctas':>5} {'steps':>5} {'pre':>6} {'fixed':>6} {'step':>6} "
          f"{'dkv':>6} {'tail':>6} {'gap':>6} {'sum':>6} {'in steps':>8} {'busy':>5} | {'GHz':>5} {'kcyc/step':>9} "
          f"{'(slope)':>7} {'dkv kcyc':>8}")
    for hdim in a.hdims:
        mod = flashbuild.load(direction="bwd", arch="sm90", hdim=str(hdim), dtype=a.dtype, causal="both",
                              features=[], nvcc_flags=[FLAG, *a.nvcc_flag])
        step_of = {}
        for seqlen in a.seqlens:
            for causal in sorted(a.causal, reverse=True):  # causal first: its fit gives the step to the other
                batch, heads = 16384 // seqlen, 2048 // hdim
                g = torch.Generator(device="cuda").manual_seed(seqlen + hdim + causal)
                rnd = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)  # noqa: E731
                q, k, v, do = (rnd(batch, seqlen, heads, hdim) for _ in range(4))
                o, lse = _reference_out_lse(q, k, v, causal)
                for _ in range(2):
                    mod.mha_bwd(do, q, k, v, o, lse, causal=causal)
                buf.zero_()
                os.environ[VAR] = f"{buf.data_ptr()}:{a.calls}:{CTAS}:{hdim}-{seqlen}-{int(causal)}"
                try:
                    for _ in range(a.calls):
                        mod.mha_bwd(do, q, k, v, o, lse, causal=causal)
                    torch.cuda.synchronize()
                finally:
                    del os.environ[VAR]
                flat = buf.cpu().tolist()
                calls = [decode(flat, c) for c in range(a.calls)]
                sums = [summarize(c) for c in calls if c]
                keys = [k for k in sums[0] if isinstance(sums[0][k], (int, float))]
                s = {k: statistics.median([x[k] for x in sums]) for k in keys}
                if causal:
                    step_of[seqlen] = s["per_step"]
                elif math.isnan(s["per_step"]) and seqlen in step_of:
                    # every CTA walks all query blocks: the causal call's step gives the fixed part
                    s["per_step"] = step_of[seqlen]
                    s["loop_fixed"] = s["loop"] - s["per_step"] * s["blocks_median"]
                total = s["pre"] + s["loop_fixed"] + s["dkv"] + s["tail"] + s["gap"]
                s.update(hdim=hdim, seqlen=seqlen, causal=causal, fixed_us=total,
                         fixed_steps=total / s["per_step"] if s["per_step"] else math.nan)
                report.append(s)
                raw.append({"hdim": hdim, "seqlen": seqlen, "causal": causal, "calls": calls})
                print(f"{hdim:>4} {seqlen:>6} {('on' if causal else 'off'):>6} {s['ctas']:>5.0f} "
                      f"{s['blocks_median']:>5.0f} {s['pre']:>6.2f} {s['loop_fixed']:>6.2f} {s['per_step']:>6.3f} "
                      f"{s['dkv']:>6.2f} {s['tail']:>6.2f} {s['gap']:>6.2f} {total:>6.2f} {s['fixed_steps']:>8.2f} "
                      f"{s['busy']:>5.3f} | {s['ghz']:>5.3f} {s['step_kcycles_mean']:>9.3f} {s['step_kcycles']:>7.3f} "
                      f"{s['dkv_kcycles']:>8.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": report, "records": raw}, f)


if __name__ == "__main__":
    main()
