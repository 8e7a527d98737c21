"""A timeline of the Hopper split-KV decode tile's CTAs, call by call (issue 45; README.md beside says why).

Usage:
    python3 benchmarks/decode_timeline/timeline.py [--rows 64:8:4096,64:8:16384,128:8:4096,64:1:4096]
                                                   [--calls 32] [--warmup 5] [--modes graph,eager]
                                                   [--build-hdims 64,128] [--json out.json]

Loads the split-KV build with -DFLASHBUILD_SPLITKV_TIMELINE=1 (kernels/common/timeline.h: each CTA's recorder
thread writes %globaltimer at its entry, after griddepcontrol.wait, when its first K stage has landed, after its last
key block's P V, before its stores and merge, and at its end, with its SM, its first tile and whether it merged the
splits) and calls flash_attn_with_kvcache as benchmarks/decode/decode_table.py does (one query token, 32 query heads
on 8 K/V heads, fp16, cache_seqlens an int32 device tensor, every call on another copy of the cache so none reads it
from L2). Each row (hdim:batch:cache) runs --calls calls back to back, replayed from one CUDA graph (after --warmup
replays; the records are the last replay's) and eagerly, each call's CTAs writing their own block of the buffer.
Per call, relative to the call's earliest CTA entry (a launch's start is not on the device clock): the spread of
the CTAs' entries, griddepcontrol.wait's return, the first K stage, the main loop (first stage to last block), the
stores and merge (the merging CTAs' own time), the spread of the CTAs' ends, the call's span, and the gap from the
previous call's last end (negative: the programmatic launch overlapped them). Medians over the calls, in µs; the
raw records (ns) go to --json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics

HEADS, KV_HEADS = 32, 8
FLAG = "-DFLASHBUILD_SPLITKV_TIMELINE=1"
VAR = "FLASHBUILD_SPLITKV_TIMELINE"  # <address>:<calls>:<ctas>:<tag>, read by the launch (common/timeline.h)
WORDS = 16  # kTimelineWords
CTAS = 4096  # a call's CTA capacity in the buffer (the decode tile launches one CTA a tile: batch x K/V heads x splits)
ROTATE_BYTES = 256e6
# Slots of a record (common/timeline.h, TimelineSlot)
ENTRY, WAITED, FIRST, LAST, STORE, END, WHERE, TILE = range(8)


def parse_rows(text: str) -> list[tuple[int, int, int]]:
    rows = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"timeline.py: --rows item {item!r}: give hdim:batch:cache with positive integers, "
                             f"e.g. 64:8:4096")
        hdim, batch, cache = map(int, parts)
        if hdim not in (64, 128):
            raise SystemExit(f"timeline.py: --rows item {item!r}: the decode tile serves head dims 64 and 128")
        rows.append((hdim, batch, cache))
    return rows


def decode_records(flat: list[int], calls: int) -> list[list[dict]]:
    """The buffer's words -> per call, its CTAs' records (the CTAs that wrote one: entry != 0)."""
    out = []
    for c in range(calls):
        ctas = []
        for b in range(CTAS):
            w = flat[(c * CTAS + b) * WORDS:(c * CTAS + b + 1) * WORDS]
            if w[ENTRY] == 0:
                continue
            where, tile = w[WHERE], w[TILE]
            ctas.append({"cta": b, "entry": w[ENTRY], "waited": w[WAITED], "first": w[FIRST], "last": w[LAST],
                         "store": w[STORE], "end": w[END], "sm": where & 0xFFFFFFFF, "tiles": (where >> 32) & 0xFFFF,
                         "merged": bool((where >> 48) & 1), "batch": tile & 0xFFFF, "head": (tile >> 16) & 0xFFFF,
                         "split": (tile >> 32) & 0xFFFF, "splits": (tile >> 48) & 0xFFFF,
                         "clocks": w[8:12]})
        out.append(ctas)
    return out


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else math.nan


def call_stats(ctas: list[dict], prev_end: float | None) -> dict:
    """One call's figures in µs (stamps are ns). Only CTAs with keys have first/last stamps (tiles > 0)."""
    us = 1e-3
    t0 = min(c["entry"] for c in ctas)
    work = [c for c in ctas if c["tiles"] > 0]
    merged = [c for c in ctas if c["merged"]]
    ends = [c["end"] for c in ctas]
    stamps = sorted({c[k] for c in ctas for k in ("entry", "waited", "first", "last", "store", "end") if c[k]})
    steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    return {
        "ctas": len(ctas),
        "sms": len({c["sm"] for c in ctas}),
        "splits": max((c["splits"] for c in work), default=0),
        "entry_spread": (max(c["entry"] for c in ctas) - t0) * us,
        "waited_med": med([(c["waited"] - t0) * us for c in ctas]),
        "waited_max": (max(c["waited"] for c in ctas) - t0) * us,
        "first_med": med([(c["first"] - t0) * us for c in work]),
        "first_max": max(((c["first"] - t0) * us for c in work), default=math.nan),
        "first_after_wait_med": med([(c["first"] - c["waited"]) * us for c in work]),
        "mainloop_med": med([(c["last"] - c["first"]) * us for c in work]),
        "mainloop_max": max(((c["last"] - c["first"]) * us for c in work), default=math.nan),
        "last_block_max": max(((c["last"] - t0) * us for c in work), default=math.nan),
        "store_to_end_med": med([(c["end"] - c["store"]) * us for c in ctas if not c["merged"]]),
        "merge_med": med([(c["end"] - c["store"]) * us for c in merged]),
        "merge_max": max(((c["end"] - c["store"]) * us for c in merged), default=math.nan),
        "merge_start_after_last_block": (max((c["store"] for c in merged), default=math.nan) -
                                         max((c["last"] for c in work), default=math.nan)) * us,
        "end_spread": (max(ends) - min(ends)) * us,
        "tail_after_last_block": (max(ends) - max((c["last"] for c in work), default=math.nan)) * us,
        "span": (max(ends) - t0) * us,
        "gap_from_previous": (t0 - prev_end) * us if prev_end is not None else math.nan,
        "wait_after_previous": (min(c["waited"] for c in ctas) - prev_end) * us if prev_end is not None else math.nan,
        "timer_step_ns": min(steps) if steps else math.nan,
    }


COLUMNS = [("ctas", "CTAs"), ("sms", "SMs"), ("splits", "splits"), ("entry_spread", "entry spread"),
           ("waited_med", "wait ret. (med)"), ("first_med", "1st K stage (med)"), ("first_max", "1st K stage (max)"),
           ("mainloop_med", "main loop (med)"), ("last_block_max", "last block (max)"),
           ("merge_med", "merge (med)"), ("merge_start_after_last_block", "last merge start - last block"),
           ("end_spread", "end spread"), ("tail_after_last_block", "tail after last block"), ("span", "call span"),
           ("gap_from_previous", "gap from prev. end"), ("wait_after_previous", "wait ret. - prev. end")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Needs a CUDA GPU (sm90) and builds the split-KV extension with " + FLAG)
    parser.add_argument("--rows", default="64:8:4096,64:8:16384,128:8:4096,64:1:4096",
                        help="hdim:batch:cache rows, comma-separated (the first two: the rows below cuDNN; the "
                             "others: controls)")
    parser.add_argument("--calls", type=int, default=32, help="calls recorded per row and mode (back to back)")
    parser.add_argument("--warmup", type=int, default=5, help="graph replays (eager passes) before the recorded one")
    parser.add_argument("--modes", default="graph,eager", help="graph, eager or both, comma-separated")
    parser.add_argument("--build-hdims", default="64,128", help="head dims of the study build")
    parser.add_argument("--json", help="write every record (ns) and every call's figures here")
    args = parser.parse_args()
    rows = parse_rows(args.rows)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("graph", "eager") for m in modes):
        raise SystemExit(f"timeline.py: --modes {args.modes!r}: give graph, eager or graph,eager")
    if args.calls < 2 or args.warmup < 1:
        raise SystemExit("timeline.py: --calls must be at least 2 and --warmup at least 1")

    import torch
    import flashbuild

    if not torch.cuda.is_available():
        raise SystemExit("timeline.py: no CUDA device: this study runs on an sm90 GPU (run.sh, README.md)")
    m = flashbuild.load(hdim=args.build_hdims, dtype="fp16", arch="native", direction="splitkv", causal="off",
                        features=[], nvcc_flags=[FLAG])
    buffer = torch.zeros(args.calls * CTAS * WORDS, dtype=torch.int64, device="cuda")
    tag = [0]

    def record_on():
        tag[0] += 1
        os.environ[VAR] = f"{buffer.data_ptr()}:{args.calls}:{CTAS}:{tag[0]}"

    def record_off():
        os.environ.pop(VAR, None)

    results = []
    for hdim, batch, cache in rows:
        bytes_kv = 2 * batch * cache * KV_HEADS * hdim * 2
        copies = max(2, math.ceil(ROTATE_BYTES / bytes_kv))
        torch.manual_seed(0)
        q = torch.randn(batch, 1, HEADS, hdim, device="cuda", dtype=torch.float16)
        ks = [torch.randn(batch, cache, KV_HEADS, hdim, device="cuda", dtype=torch.float16) for _ in range(copies)]
        vs = [torch.randn_like(k) for k in ks]
        lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")

        def step(i):
            return m.flash_attn_with_kvcache(q, ks[i % copies], vs[i % copies], cache_seqlens=lens)

        for mode in modes:
            record_off()
            buffer.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if mode == "graph":
                # warmed on a side stream, recording: the launch checks a new buffer (cudaPointerGetAttributes,
                # cuMemGetAddressRange) at its first launch, here, not during the capture
                record_on()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for i in range(args.calls):
                        step(i)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
                buffer.zero_()
                graph = torch.cuda.CUDAGraph()
                record_on()  # a new tag: the captured launches take blocks 0..calls-1, in order
                with torch.cuda.graph(graph):
                    for i in range(args.calls):
                        step(i)
                record_off()
                for _ in range(args.warmup):
                    graph.replay()
                start.record()
                graph.replay()
                end.record()
            else:
                for _ in range(args.warmup):
                    for i in range(args.calls):
                        step(i)
                record_on()
                start.record()
                for i in range(args.calls):
                    step(i)
                end.record()
                record_off()
            end.synchronize()
            per_call_us = start.elapsed_time(end) * 1e3 / args.calls
            flat = buffer.cpu().tolist()
            calls = decode_records(flat, args.calls)
            missing = [i for i, c in enumerate(calls) if not c]
            if missing:
                raise SystemExit(f"timeline.py: row {hdim}:{batch}:{cache} {mode}: calls {missing} wrote no record: "
                                 f"is the extension the study build ({FLAG})?")
            stats, prev_end = [], None
            for c in calls:
                stats.append(call_stats(c, prev_end))
                prev_end = max(x["end"] for x in c)
            # every call after the first: the first has no previous call in this pass's records
            summary = {k: med([s[k] for s in stats[1:]]) for k, _ in COLUMNS}
            results.append({"hdim": hdim, "batch": batch, "cache": cache, "mode": mode, "copies": copies,
                            "per_call_us_events": per_call_us, "summary": summary, "calls": stats,
                            "records": calls})
            if mode == "graph":
                del graph
        ks.clear(), vs.clear()
        torch.cuda.empty_cache()

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.calls} calls a row and mode, medians "
          f"over calls 1-{args.calls - 1} (call 0 has no previous call in the records); µs")
    for r in results:
        print(f"\n{r['hdim']}/{r['batch']}/{r['cache'] // 1024}k {r['mode']}: events {r['per_call_us_events']:.2f} "
              f"µs a call; timer step >= {med([s['timer_step_ns'] for s in r['calls']]):.0f} ns")
    print("\n| hdim | batch | cache | mode | events µs/call | " + " | ".join(n for _, n in COLUMNS) + " |")
    print("| --- " * (5 + len(COLUMNS)) + "|")
    for r in results:
        s = r["summary"]
        cells = " | ".join(f"{s[k]:.0f}" if k in ("ctas", "sms", "splits") else f"{s[k]:.2f}" for k, _ in COLUMNS)
        print(f"| {r['hdim']} | {r['batch']} | {r['cache'] // 1024}k | {r['mode']} | {r['per_call_us_events']:.2f} | "
              f"{cells} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "flag": FLAG,
                       "calls": args.calls, "warmup": args.warmup, "results": results}, f)


if __name__ == "__main__":
    main()
