"""Split-KV decode bandwidth on the GPU: K/V bytes read per second by mha_fwd_kvcache.

Usage (prints a markdown table; writes JSON when given a path):
    python3 benchmarks/decode/decode_bandwidth.py [--json out.json] [--paged PAGE_SIZE] [--batch 1,8,64]
                                                  [--cache 4096,16384,65536,131072]

One query token per sequence (seqlen_q = 1), 32 query heads sharing 8 K/V heads, head dim 128 (--hdim), fp16, the
whole cache valid (cache_seqlens = cache length). Bytes = K + V of the cache, read once. Median of 50
CUDA-event timings after 5 warm-ups, the raw extension call (no Python wrapper); with --kernel-time, of the
summed durations of the call's kernels (the GPU's time alone: a small call's time is otherwise the host's). The cache
is allocated in as many copies as make 256 MB (at least two), and every call of a row, whichever is timed (ours,
SDPA's), reads the copy after the previous call's, so that no call reads the cache from the 50 MB L2 (the JSON's
cache_copies). (Until 2026-11-26 each timed call had its own turn through the copies: the calls of one rep read the
same copy one after the other, and every call after the first found a cache smaller than the L2 there:
benchmarks/decode/README.md, "The cache rotation".) `auto` lets the binding
choose the number of splits; `1 split` forces none, to show what splitting buys.

--paged PAGE_SIZE measures a paged cache beside the contiguous one: the same keys in pages of PAGE_SIZE
rows, in shuffled order behind a block table (flash_attn_with_kvcache's block_table), and reports both
(and the paged/contiguous time ratio) on the same inputs. The calls of a row are timed in turns, rep by
rep.

The kernels come from the build of the split-KV GPU tests (tests/gpu/test_kvcache_gpu.py: hdim 64 and
128, fp16, causal and not, with the local and softcap variants), so one build serves both.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

import flashbuild

HEADS, KV_HEADS = 32, 8
ROTATE_BYTES = 256e6  # each rep reads another copy of the cache until this many bytes: past the 50 MB L2


def event_ms(fn) -> float:
    """One call's time between two CUDA events (the host's part included)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def kernel_ms(fn) -> float:
    """The summed durations of the kernels one call ran (CUPTI through torch.profiler): the GPU's time alone."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type.name == "CUDA") / 1e3


def median_ms(*fns, reps: int = 50, timer=event_ms) -> list[float]:
    """The median time of each function (event_ms, or kernel_ms); their timings alternate rep by rep, so
    that a drift of the clocks over the run weighs on all of them alike."""
    for fn in fns:
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, samples in zip(fns, times):
            samples.append(timer(fn))
    return [sorted(samples)[len(samples) // 2] for samples in times]


def decode_inputs(batch: int, cache: int, heads: int, kv_heads: int, hdim: int) -> tuple[list, int, torch.Tensor]:
    """Fresh random fp16 (q of one token, k, v) in as many copies as make ROTATE_BYTES, at least two (a caller reads
    them in turn, every call the copy after the previous call's: none from L2); their count; the cache lengths (full)."""
    gb = 2 * batch * cache * kv_heads * hdim * 2 / 1e9
    copies = max(2, int(-(-ROTATE_BYTES // (gb * 1e9))))
    sets = [(torch.randn(batch, 1, heads, hdim, device="cuda", dtype=torch.float16),
             torch.randn(batch, cache, kv_heads, hdim, device="cuda", dtype=torch.float16),
             torch.randn(batch, cache, kv_heads, hdim, device="cuda", dtype=torch.float16)) for _ in range(copies)]
    return sets, copies, torch.full((batch,), cache, dtype=torch.int32, device="cuda")


def to_pages(cache: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, capacity, heads, dim) -> pages (batch * capacity / page_size, page_size, heads, dim) in
    shuffled order, and the int32 block table (batch, capacity / page_size) that finds them."""
    batch, capacity = cache.shape[:2]
    per_row = capacity // page_size
    table = torch.randperm(batch * per_row, device=cache.device)
    pages = torch.empty(batch * per_row, page_size, *cache.shape[2:], dtype=cache.dtype, device=cache.device)
    pages[table] = cache.reshape(batch * per_row, page_size, *cache.shape[2:])
    return pages, table.view(batch, per_row).int()


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--paged", type=int, default=0, metavar="PAGE_SIZE",
                        help="also time a paged cache of PAGE_SIZE-row pages (a multiple of 128 at head dim 128)")
    parser.add_argument("--batch", type=ints, default=[1, 8, 64], help="batch sizes, e.g. 8 or 1,8,64")
    parser.add_argument("--cache", type=ints, default=[4096, 16384, 65536, 131072], help="cache lengths")
    parser.add_argument("--hdim", type=int, default=128, choices=(64, 128, 256),
                        help="head dim (64 and 128 from the split-KV GPU tests' build; 256 from one of its own)")
    parser.add_argument("--kernel-time", action="store_true",
                        help="time each call by the durations of its kernels (torch.profiler, CUPTI): the GPU's "
                             "time without the host's, which bounds the small calls otherwise (a CUDA graph cannot "
                             "hold the call: the binding checks cache_seqlens on the host)")
    parser.add_argument("--sdpa", action="store_true",
                        help="also time PyTorch SDPA's flash and cuDNN backends on the same q, k, v (enable_gqa), in "
                             "turns with the split-KV calls, and report the largest difference of our output from theirs")
    parser.add_argument("--nvcc-flag", action="append", default=[],
                        help="extra nvcc flag for the kernels (repeatable; part of the build key), e.g. a tuning macro")
    args = parser.parse_args()
    if args.paged and any(cache % args.paged for cache in args.cache):
        parser.error(f"--paged {args.paged} must divide every --cache length ({args.cache})")
    ext = flashbuild.load(hdim="64,128" if args.hdim <= 128 else str(args.hdim), dtype="fp16", arch="native",
                          direction="splitkv", causal="both", nvcc_flags=args.nvcc_flag).ext
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, build {ext.build_key()}")
    header = "| batch | cache | time (us) | GB/s auto | GB/s 1 split |"
    if args.paged:
        header += f" paged {args.paged}: time (us) | GB/s | paged / contiguous time |"
    if args.sdpa:
        header += " sdpa-flash (us) | sdpa-cudnn (us) | auto / fastest SDPA time | max abs diff |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for batch in args.batch:
        for cache in args.cache:
            if batch * cache > 64 * 65536:  # keep K + V under ~9 GB
                continue
            gb = 2 * batch * cache * KV_HEADS * args.hdim * 2 / 1e9
            # A cache read again right after another call read it would be timed (partly) from L2: every call
            # reads the next of enough copies that together exceed it.
            copies = max(2, int(-(-ROTATE_BYTES // (gb * 1e9))))
            sets = []
            for _ in range(copies):
                k = torch.randn(batch, cache, KV_HEADS, args.hdim, device="cuda", dtype=torch.float16)
                v = torch.randn_like(k)
                pages = (to_pages(k, args.paged), to_pages(v, args.paged)) if args.paged else None
                sets.append((torch.randn(batch, 1, HEADS, args.hdim, device="cuda", dtype=torch.float16), k, v, pages))
            lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")

            turn = itertools.count()  # one turn for every call of the row, timed or warming up

            def rotating(call):
                return lambda: call(*sets[next(turn) % copies])
            calls = [rotating(lambda q, k, v, _: ext.mha_fwd_kvcache(q, k, v, lens, False, None, 0)),
                     rotating(lambda q, k, v, _: ext.mha_fwd_kvcache(q, k, v, lens, False, None, 1))]
            if args.paged:
                calls.append(rotating(lambda q, k, v, p: ext.mha_fwd_kvcache(q, p[0][0], p[1][0], lens, False, None, 0,
                                                                             block_table=p[0][1])))
            sdpa_names = []
            if args.sdpa:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def sdpa(q, k, v, _, backend=backend):
                        with sdpa_kernel(backend):
                            return torch.nn.functional.scaled_dot_product_attention(
                                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True).transpose(1, 2)
                    try:
                        theirs = sdpa(*sets[0])
                    except RuntimeError as exc:  # the backend does not take these tensors: a column of n/a
                        print(f"{name}: n/a ({str(exc).splitlines()[0][:120]})")
                        continue
                    calls.append(rotating(sdpa))
                    sdpa_names.append(name)
                    ours = ext.mha_fwd_kvcache(*sets[0][:3], lens, False, None, 0)[0]
                    diff = (ours.float() - theirs.float()).abs().max().item()
            auto, single, *rest = median_ms(*calls, timer=kernel_ms if args.kernel_time else event_ms)
            paged, sdpa_ms = rest[:1 if args.paged else 0], dict(zip(sdpa_names, rest[1 if args.paged else 0:]))
            row = {"batch": batch, "cache": cache, "us": auto * 1e3, "gbps": gb / auto * 1e3,
                   "gbps_one_split": gb / single * 1e3, "cache_copies": copies}
            line = f"| {batch} | {cache} | {row['us']:.1f} | {row['gbps']:.0f} | {row['gbps_one_split']:.0f} |"
            if args.paged:
                row.update(page_size=args.paged, paged_us=paged[0] * 1e3, paged_gbps=gb / paged[0] * 1e3,
                           paged_over_contiguous=paged[0] / auto)
                line += f" {row['paged_us']:.1f} | {row['paged_gbps']:.0f} | {row['paged_over_contiguous']:.3f} |"
            if args.sdpa:
                row.update({f"{name}_us": t * 1e3 for name, t in sdpa_ms.items()},
                           max_abs_diff_vs_sdpa=diff if sdpa_ms else None)
                cells = [f"{sdpa_ms[n] * 1e3:.1f}" if n in sdpa_ms else "n/a" for n in ("sdpa-flash", "sdpa-cudnn")]
                ratio = f"{auto / min(sdpa_ms.values()):.3f}" if sdpa_ms else "n/a"
                line += f" {cells[0]} | {cells[1]} | {ratio} | {diff if sdpa_ms else float('nan'):.2e} |"
            rows.append(row)
            print(line, flush=True)
            del sets, k, v, calls
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
