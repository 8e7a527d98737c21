"""Backward choices taken at one head dim and never timed at another (kernels/hopper/bwd_traits.h, bwd_tile), A/B-timed
against the tree's defaults through the backward step harness of ../hopper_bwd_uniform/ab.py (its checks: every arm's
gradients bitwise equal to base's in deterministic mode, dense and packed, and to a second run of the arm, and within
--tol of base's in the default mode; its turns with SDPA cuDNN; its table and ab.json). The arms (each define sets its
field for every head dim of the build, so a build holds one head dim):
  base    the tree's defaults
  halves  -DFLASHBUILD_HOPPER_BWD_DQ_HALVES=1: each consumer warpgroup hands its half of dQ to the writer warp alone
          (hdim 64 and 128's default: 1.025-1.069x at hdim 128, ../hopper_bwd_hand_off/)
  tmaf    -DFLASHBUILD_HOPPER_BWD_TMA_FIRST=1: the producer's Q / dO copies before its LSE / dsum loads (hdim 64's)
  ht      both
  (noexit: the dQ writer ending without its last full wait; in a7c9e74 only, README h200-5)
  (ncs4, ncs16: the non-causal grid in sections of heads; in 5bca4e4 only, README h200-6)
  dkvvec  -DFLASHBUILD_HOPPER_BWD_DKV_VEC=1: dK / dV staged, then 16-byte shared loads and global stores by every
          consumer thread (bwd_epilogue.h, kDkvVector; the default at hdim 96-192 and hdim 64 non-causal since h200-8)
  (ml, s2ml: the mask after the softmax gradient, without / with the shuffled stats; in a36ca51 only, README h200-2)
Environment: HDIMS (one head dim, default 96), ARMS (comma list, base first; default base,halves,tmaf,ht). Rows: fp16
and bf16, causal or not, 1k / 4k / 16k (1k first; a cut budget loses 16k bf16 last); --plan smoke: one row.

    HDIMS=96 ARMS=base,halves python3 benchmarks/hopper_bwd_untimed/ab.py --out OUT [--rounds 3] [--budget 120]
    python3 benchmarks/hopper_bwd_untimed/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

_HARNESS = pathlib.Path(__file__).resolve().parent.parent / "hopper_bwd_uniform" / "ab.py"
_spec = importlib.util.spec_from_file_location("hopper_bwd_uniform_ab", _HARNESS)
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
ab.__doc__ = __doc__  # its --help describes this study

FLAGS = {
    "base": [],
    "halves": [f"{ab.D}DQ_HALVES=1"],
    "tmaf": [f"{ab.D}TMA_FIRST=1"],
    "ht": [f"{ab.D}DQ_HALVES=1", f"{ab.D}TMA_FIRST=1"],
    "dkvvec": [f"{ab.D}DKV_VEC=1"],
}
ARMS = os.environ.get("ARMS", "base,halves,tmaf,ht").split(",")
HDIMS = [int(h) for h in os.environ.get("HDIMS", "96").split(",")]
_unknown = [a for a in ARMS if a not in FLAGS]
if _unknown or ARMS[0] != "base" or len(HDIMS) != 1:
    sys.exit(f"ab.py: ARMS={','.join(ARMS)} HDIMS={','.join(map(str, HDIMS))}: the arms are {', '.join(FLAGS)}, base "
             "first; one head dim")
BUILD = dict(hdim=str(HDIMS[0]), dtype="fp16,bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {arm: [(BUILD, FLAGS[arm])] for arm in ARMS}


def plan_rows(plan):
    if plan == "smoke":
        return [(HDIMS[0], "fp16", False, 1024, ARMS)]
    return [(HDIMS[0], dt, causal, s, ARMS) for s in (1024, 4096, 16384) for dt in ("fp16", "bf16")
            for causal in (False, True)]


ab.plan_rows = plan_rows

if __name__ == "__main__":
    ab.main(sys.argv[1:])
