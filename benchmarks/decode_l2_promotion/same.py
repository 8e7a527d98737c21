"""The decode tile with FLASHBUILD_SPLITKV_L2=256 against the default, bit for bit (run.sh's check before it times,
on the tree of 59eeee1: main no longer has the switch): hdim 64 and 128, batch 1, 8 and 64 (1-32 splits, the cluster merge and the merge through L2), dense and paged,
outputs and LSEs equal; a bad value of the switch is the named error. One line a case, `ok` last.

    python3 benchmarks/decode_l2_promotion/same.py
"""

from __future__ import annotations

import argparse
import os

VAR = "FLASHBUILD_SPLITKV_L2"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    import torch

    import flashbuild

    m = flashbuild.load(hdim="64,128", dtype="fp16", arch="native", direction="splitkv", causal="off",
                        features=[])
    torch.manual_seed(0)
    for head_dim in (64, 128):
        for batch, capacity, paged in ((1, 4096, False), (8, 4096, True), (64, 1024, False)):
            q = torch.randn(batch, 1, 32, head_dim, device="cuda", dtype=torch.float16)
            k = torch.randn(batch, capacity, 8, head_dim, device="cuda", dtype=torch.float16)
            v = torch.randn_like(k)
            lens = torch.randint(1, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
            table = None
            if paged:
                page = 256
                per_row = capacity // page
                table = torch.randperm(batch * per_row, device="cuda").view(batch, per_row).int()
                kp = torch.empty(batch * per_row, page, 8, head_dim, device="cuda", dtype=torch.float16)
                vp = torch.empty_like(kp)
                kp[table.flatten().long()] = k.reshape(batch * per_row, page, 8, head_dim)
                vp[table.flatten().long()] = v.reshape(batch * per_row, page, 8, head_dim)
                k, v = kp, vp
            got = {}
            for value in ("", "256"):
                os.environ[VAR] = value
                got[value] = m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, block_table=table,
                                                       return_softmax_lse=True)
            same = all(torch.equal(a, b) for a, b in zip(got[""], got["256"]))
            print(f"hdim {head_dim} batch {batch} paged {paged}: equal {same}")
            assert same
    os.environ[VAR] = "512"
    try:
        m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, block_table=table)
        raise AssertionError("FLASHBUILD_SPLITKV_L2=512 was accepted")
    except RuntimeError as e:
        assert "FLASHBUILD_SPLITKV_L2='512'" in str(e), e
        print("512: the named error")
    del os.environ[VAR]
    m.check_errors()
    print("ok")


if __name__ == "__main__":
    main()
