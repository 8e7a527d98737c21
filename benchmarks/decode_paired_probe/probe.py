"""Issue 45, hdim 64 at batch 64: is it the K/V box's 128 bytes of each token's row? A probe, no kernel change.

At hdim 64 (32 query heads on 8 K/V heads) a decode tile's CTA reads 128 B of each token's 1 KB K row (and V row); at
hdim 128 it reads 256 B of a 2 KB row, and the hdim-128 tile streams faster (benchmarks/checks/merged-10/). Two K/V
heads a CTA would read 256 B of the 1 KB row. Before building that, this times the same bytes in that pattern: ours at
hdim 128 on 16 query heads and 4 K/V heads (a 1 KB row, 256 B a CTA, 4 query rows a K/V head as at 32:8: the cache
bytes of hdim 64 at 32:8 exactly), beside ours at hdim 64 32:8 and SDPA cuDNN / flash on both shapes, all graph-replayed
and eager, in turns (decode_table.py's Contender: every call reads another cache copy).

Usage (from the repo root on the GPU host, a split-KV build of hdim 64 and 128 loadable):
    python3 benchmarks/decode_paired_probe/probe.py [--batch 64] [--cache 4096,16384,65536] [--reps 10] [--json F]
        [--splits h128x4:16,h128x4:32]   (more columns of ours: a shape with num_splits forced)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "decode"))
import flashbuild  # noqa: E402
from decode_table import ROTATE_BYTES, Contender, hbm_copy_tbs  # noqa: E402

SHAPES = {"h64": (64, 32, 8), "h128x4": (128, 16, 4)}  # name: (head dim, query heads, K/V heads): the same cache bytes


def contenders(m, name: str, batch: int, cache: int, copies: int, forced: list[int]):
    hdim, hq, hk = SHAPES[name]
    torch.manual_seed(0)
    q = torch.randn(batch, 1, hq, hdim, device="cuda", dtype=torch.float16)
    ks = [torch.randn(batch, cache, hk, hdim, device="cuda", dtype=torch.float16) for _ in range(copies)]
    vs = [torch.randn_like(k) for k in ks]
    lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
    qt = q.transpose(1, 2)

    def sdpa(backend):
        def call(i):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, ks[i].transpose(1, 2), vs[i].transpose(1, 2), enable_gqa=True)
        return call

    def ours(splits):
        return lambda i: m.flash_attn_with_kvcache(q, ks[i], vs[i], cache_seqlens=lens, num_splits=splits)

    return [Contender(f"ours_{name}", ours(0), copies),
            *(Contender(f"ours_{name}_s{n}", ours(n), copies) for n in forced),
            Contender(f"cudnn_{name}", sdpa(SDPBackend.CUDNN_ATTENTION), copies),
            Contender(f"flash_{name}", sdpa(SDPBackend.FLASH_ATTENTION), copies)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", default="64", help="batch sizes, comma-separated")
    parser.add_argument("--cache", default="4096,16384,65536", help="cache lengths, comma-separated")
    parser.add_argument("--reps", type=int, default=10, help="timed passes per measurement (median)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--splits", default="", help="shape:num_splits,...: ours with the split count forced")
    args = parser.parse_args()
    forced = {name: [] for name in SHAPES}
    for item in filter(None, args.splits.split(",")):
        name, _, n = item.partition(":")
        if name not in SHAPES or not n.isdigit() or int(n) < 1:
            parser.error(f"--splits {item!r}: give shape:num_splits, a shape of {', '.join(SHAPES)} and a count >= 1")
        forced[name].append(int(n))
    m = flashbuild.load(hdim="64,128", dtype="fp16", arch="native", direction="splitkv", causal="off", features=[])
    copy_tbs = hbm_copy_tbs()
    rows = []
    for batch in map(int, args.batch.split(",")):
        for cache in map(int, args.cache.split(",")):
            nbytes = 2 * batch * cache * 8 * 64 * 2
            copies = max(2, math.ceil(ROTATE_BYTES / nbytes))
            cs = [c for name in SHAPES for c in contenders(m, name, batch, cache, copies, forced[name])]
            for rep in range(args.reps):
                for c in random.Random(rep).sample(cs, len(cs)):
                    c.time_eager()
            torch.cuda.empty_cache()
            for c in cs:
                c.capture()
            for rep in range(args.reps):
                for c in random.Random(rep).sample(cs, len(cs)):
                    c.time_graph()
            row = {"batch": batch, "cache": cache, "bytes": nbytes, **{c.key: c.result() for c in cs}}
            rows.append(row)
            cs.clear()
            torch.cuda.empty_cache()
    print(f"HBM copy {copy_tbs:.2f} TB/s; {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| batch | cache | shape | ours µs eager (graph) | cuDNN | SDPA flash | best SDPA / ours (graph) | ours TB/s (graph) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        for name in SHAPES:
            o, cu, fl = r[f"ours_{name}"], r[f"cudnn_{name}"], r[f"flash_{name}"]
            best = lambda j: min(x for x in (cu[j], fl[j]) if x == x)  # noqa: E731
            print(f"| {r['batch']} | {r['cache'] // 1024}k | {name} | {o[0] * 1e3:.1f} ({o[1] * 1e3:.1f}) | "
                  f"{cu[0] * 1e3:.1f} ({cu[1] * 1e3:.1f}) | {fl[0] * 1e3:.1f} ({fl[1] * 1e3:.1f}) | "
                  f"{best(0) / o[0]:.3f} ({best(1) / o[1]:.3f}) | {r['bytes'] / o[0] / 1e9:.2f} "
                  f"({r['bytes'] / o[1] / 1e9:.2f}) |")
            for n in forced[name]:
                f = r[f"ours_{name}_s{n}"]
                print(f"| {r['batch']} | {r['cache'] // 1024}k | {name}, {n} splits | {f[0] * 1e3:.1f} "
                      f"({f[1] * 1e3:.1f}) |  |  | {best(0) / f[0]:.3f} ({best(1) / f[1]:.3f}) | "
                      f"{r['bytes'] / f[0] / 1e9:.2f} ({r['bytes'] / f[1] / 1e9:.2f}) |")
        g64, g128 = r["ours_h64"][1], r["ours_h128x4"][1]
        print(f"|  |  | h128x4 / h64 time (graph) | {g128 / g64:.3f} | h128x4 ours / h64 cuDNN: "
              f"{g128 / r['cudnn_h64'][1]:.3f} |  |  |  |")
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_tbs": copy_tbs, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
