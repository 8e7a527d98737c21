"""One causal forward call per FLASHBUILD_HOPPER_FWD_PAIRS setting, for a profiler to catch (run.sh runs it under
ncu): 16k tokens, model dim 2048, fp16, through one of ab.py's builds (loaded from FLASHBUILD_CACHE_DIR, or built).

    python3 benchmarks/fwd_causal_fa3/one_call.py [--build new] [--hdim 128] [--seqlen 16384] [--settings short,all:2]
"""
import argparse
import os
import pathlib
import sys

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--build", default="new", help="a build of ab.py's BUILDS")
parser.add_argument("--hdim", type=int, default=128, help="head dim (nheads = 2048 / hdim)")
parser.add_argument("--seqlen", type=int, default=16384, help="sequence length (batch = 16384 / seqlen)")
parser.add_argument("--settings", default="short,all:2", help="FLASHBUILD_HOPPER_FWD_PAIRS values, one call each")
args = parser.parse_args()

import torch  # noqa: E402

import flashbuild  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ab import BUILDS  # noqa: E402

keywords, flags = BUILDS[args.build]
m = flashbuild.load(direction="fwd", arch="sm90", features=[], nvcc_flags=flags, **keywords)
batch, heads = max(1, 16384 // args.seqlen), 2048 // args.hdim
q, k, v = (torch.randn(batch, args.seqlen, heads, args.hdim, device="cuda", dtype=torch.float16) for _ in range(3))
for setting in args.settings.split(","):
    os.environ["FLASHBUILD_HOPPER_FWD_PAIRS"] = setting
    m.flash_attn_func(q, k, v, causal=True)
    torch.cuda.synchronize()
    print(f"{args.build} hdim {args.hdim}: b{batch} h{heads} s{args.seqlen} causal, pairs {setting}: called")
