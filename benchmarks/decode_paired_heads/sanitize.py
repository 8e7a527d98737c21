"""Paired calls (two K/V heads a CTA, kernels/hopper/splitkv_decode_launch.h) for compute-sanitizer: 3 and 4 query heads
a K/V head, a paged cache, a cache row index with left padding, lengths off the block and an empty row, all with one
split (the pairs' only count); then, with --bad, the same shapes with a bad index value in one row each (cache_seqlens
past the cache or negative, a block table entry past the pages, a cache row index past the rows, a left padding past the
row): each must come back as InvalidIndexError, and the sanitizer must see no access outside the tensors. The profiler
sees no kernel under the sanitizer: which kernel each call runs is the GPU test's to check
(tests/gpu/test_kvcache_decode_pairs_gpu.py), for these shapes the pairs'.

    compute-sanitizer --tool memcheck python3 benchmarks/decode_paired_heads/sanitize.py [--bad] [--shapes N]
    compute-sanitizer --tool racecheck python3 benchmarks/decode_paired_heads/sanitize.py --shapes 2
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import flashbuild


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=int, default=4, help="how many of the four shapes to call (racecheck is slow)")
    parser.add_argument("--bad", action="store_true", help="also call each shape with a bad index value in one row")
    args = parser.parse_args()
    m = flashbuild.load(hdim=64, dtype="fp16", arch="native", direction="splitkv", causal="off", features=[])
    torch.manual_seed(0)
    for batch, nheads, nheads_k, capacity, page, rows, leftpad in (
            (64, 32, 8, 1000, 0, 0, False), (40, 24, 8, 2000, 0, 0, False), (64, 32, 8, 2048, 256, 0, False),
            (48, 32, 8, 1024, 0, 64, True))[:args.shapes]:
        cache_rows = rows or batch
        q = torch.randn(batch, 1, nheads, 64, device="cuda", dtype=torch.float16)
        k = torch.randn(cache_rows, capacity, nheads_k, 64, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        lens = torch.randint(0, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
        lens[0], lens[-1] = capacity, 0
        kwargs = {"cache_seqlens": lens}
        if page:
            per_row = capacity // page
            k, v = (t.view(batch * per_row, page, nheads_k, 64) for t in (k, v))
            kwargs["block_table"] = torch.randperm(batch * per_row, device="cuda").int().view(batch, per_row)
        if rows:
            kwargs["cache_batch_idx"] = torch.randperm(rows, device="cuda")[:batch].int()
        if leftpad:
            kwargs["cache_leftpad"] = (lens // 3).int()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = m.flash_attn_with_kvcache(q, k, v, **kwargs)
            torch.cuda.synchronize()
        names = {e.name[:70] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
        print(f"b{batch} h{nheads}/{nheads_k} cache {capacity} page {page} rows {rows} leftpad {leftpad}: "
              f"finite {bool(torch.isfinite(out).all())}, kernels {sorted(names)}")
        if args.bad:
            for name, value in bad_values(kwargs, capacity, cache_rows, k.shape[0]):
                bad = dict(kwargs, **{name: value})
                m.flash_attn_with_kvcache(q, k, v, **bad)
                try:
                    m.check_errors()
                except flashbuild.InvalidIndexError as e:
                    print(f"  bad {name}: {str(e).splitlines()[0][:110]}")
                else:
                    raise SystemExit(f"bad {name} at b{batch}: no InvalidIndexError")


def bad_values(kwargs, capacity, cache_rows, num_pages):
    """(argument, tensor) pairs: each of the call's index tensors with one bad value in one row."""
    lens = kwargs["cache_seqlens"]
    yield "cache_seqlens", torch.where(torch.arange(len(lens), device="cuda") == 3, capacity + 1, lens).int()
    yield "cache_seqlens", torch.where(torch.arange(len(lens), device="cuda") == 1, -5, lens).int()
    if "block_table" in kwargs:
        table = kwargs["block_table"].clone()
        table[2, 1] = num_pages + 3
        yield "block_table", table
    if "cache_batch_idx" in kwargs:
        idx = kwargs["cache_batch_idx"].clone()
        idx[4] = cache_rows
        yield "cache_batch_idx", idx
    if "cache_leftpad" in kwargs:
        pad = kwargs["cache_leftpad"].clone()
        pad[5] = capacity + 2
        yield "cache_leftpad", pad


if __name__ == "__main__":
    main()
