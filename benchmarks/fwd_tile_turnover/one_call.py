"""One causal forward call per head dim at 1k (batch 16, 2048 / hdim heads, fp16: the bench's 1k row), for a
profiler to catch (run.sh runs it under ncu, once per tree). It loads the A/B selection run.sh builds (hdim
64/128/192/256, fp16, causal both, no features) from FLASHBUILD_CACHE_DIR and the tree on PYTHONPATH.

    python3 benchmarks/fwd_tile_turnover/one_call.py --hdim 64,128,256 [--seqlen 1024]
"""
import argparse

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--hdim", default="64,128,256", help="head dims to call, comma-separated")
parser.add_argument("--seqlen", type=int, default=1024, help="sequence length (batch = 16384 / seqlen)")
args = parser.parse_args()

import torch  # noqa: E402

import flashbuild  # noqa: E402

m = flashbuild.load(hdim="64,128,192,256", dtype="fp16", arch="sm90", direction="fwd", causal="both", features=[])
for hdim in (int(h) for h in args.hdim.split(",")):
    batch, heads = 16384 // args.seqlen, 2048 // hdim
    q, k, v = (torch.randn(batch, args.seqlen, heads, hdim, device="cuda", dtype=torch.float16) for _ in range(3))
    m.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    print(f"hdim {hdim}: b{batch} h{heads} s{args.seqlen} causal called")
