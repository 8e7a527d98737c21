"""Clustered decoding calls for compute-sanitizer (run.sh's second call, README.md): the cluster merge at head dims 64
(2 splits) and 128 (2-4 splits), one tile a CTA (batch 8) and several (batch 48), dense and paged, each checked
against the L2 tail bit for bit. Loads the split-KV build of hdim 64 and 128 (fp16, causal off) as decode_table.py
does; prints one line a call and `ok` last.

    compute-sanitizer --tool memcheck python3 benchmarks/decode_cluster_merge/sanitize.py
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    import torch

    import flashbuild

    m = flashbuild.load(hdim="64,128", dtype="fp16", arch="native", direction="splitkv", causal="off",
                        features=[])
    torch.manual_seed(0)
    for head_dim, splits, batch, paged in [(64, 2, 8, False), (128, 4, 8, False), (128, 3, 8, True),
                                           (64, 2, 48, False), (128, 2, 48, True)]:
        capacity, page = 1024, 256
        q = torch.randn(batch, 1, 32, head_dim, device="cuda", dtype=torch.float16)
        k = torch.randn(batch, capacity, 8, head_dim, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        lens = torch.randint(0, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
        table = None
        if paged:
            per_row = capacity // page
            table = torch.randperm(batch * per_row, device="cuda").view(batch, per_row).int()
            k_pages = torch.empty(batch * per_row, page, 8, head_dim, device="cuda", dtype=torch.float16)
            v_pages = torch.empty_like(k_pages)
            k_pages[table.flatten().long()] = k.reshape(batch * per_row, page, 8, head_dim)
            v_pages[table.flatten().long()] = v.reshape(batch * per_row, page, 8, head_dim)
            k, v = k_pages, v_pages
        outs = {}
        for path in ("cluster-merge", "lane-merge"):
            os.environ["FLASHBUILD_SPLITKV_PATH"] = path
            outs[path] = m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, block_table=table, num_splits=splits,
                                                   return_softmax_lse=True)
        torch.cuda.synchronize()
        same = all(torch.equal(a, b) for a, b in zip(outs["cluster-merge"], outs["lane-merge"]))
        print(f"hdim {head_dim} splits {splits} batch {batch} paged {paged}: equal to lane-merge {same}")
        assert same
    m.check_errors()
    print("ok")


if __name__ == "__main__":
    main()
