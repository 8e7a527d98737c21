"""Compile (JIT, on first use) FlashInfer's decode modules that decode_table.py --flashinfer calls, one process per
(head dim, form), so that the table's first row does not time a compile: a plan and a run of a small call, its output
against a float32 reference (one query, GQA 32:8), the error and the seconds printed.

    python3 benchmarks/decode_flashinfer/prewarm.py --hdim 128 [--tensor-cores]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "decode"))
from decode_table import HEADS, KV_HEADS, flashinfer_decode  # noqa: E402  (the table's own wrapper and plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hdim", type=int, required=True)
    parser.add_argument("--tensor-cores", action="store_true", help="the use_tensor_cores form")
    args = parser.parse_args()
    import flashinfer

    batch, cache, heads, kv_heads, d = 8, 1000, HEADS, KV_HEADS, args.hdim
    torch.manual_seed(0)
    q = torch.randn(batch, 1, heads, d, device="cuda", dtype=torch.float16)
    k = torch.randn(batch, cache, kv_heads, d, device="cuda", dtype=torch.float16)
    v = torch.randn_like(k)
    t0 = time.time()
    _, run, paged = flashinfer_decode(flashinfer, q, cache, cache, args.tensor_cores)  # one page a sequence
    out = run(paged(k, v))
    torch.cuda.synchronize()
    q = q.view(batch, heads, d)
    seconds = time.time() - t0
    kk = k.float().repeat_interleave(heads // kv_heads, dim=2)  # (batch, cache, heads, d)
    vv = v.float().repeat_interleave(heads // kv_heads, dim=2)
    p = torch.softmax(torch.einsum("bhd,bkhd->bhk", q.float(), kk) / d ** 0.5, dim=-1)
    ref = torch.einsum("bhk,bkhd->bhd", p, vv)
    err = (out.float() - ref).abs().max().item()
    print(f"FlashInfer {flashinfer.__version__} hdim {d}{' tc' if args.tensor_cores else ''}: compiled and ran in "
          f"{seconds:.1f} s, max |out - fp32 reference| {err:.2e}")


if __name__ == "__main__":
    main()
