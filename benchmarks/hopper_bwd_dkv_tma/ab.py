"""The staged dK/dV epilogue of the Hopper backward (kernels/hopper/bwd_epilogue.h, stage_dkv,
-DFLASHBUILD_HOPPER_BWD_DKV_TMA=1: dK and dV written to shared memory, then one bulk copy a key row) A/B-timed against
the tree's defaults, through the backward step harness of ../hopper_bwd_uniform/ab.py (its checks: every arm's
gradients bitwise equal to base's in deterministic mode, dense and packed, and to a second run of the arm, and within
--tol of base's in the default mode; its turns with SDPA cuDNN; its table and ab.json), with this study's arms and rows:
  base    the tree's defaults
  dkvtma  -DFLASHBUILD_HOPPER_BWD_DKV_TMA=1 (every kernel of the build, the deterministic twins too)
Rows: hdim 64 and 128 (or the head dims in $HDIMS, e.g. HDIMS=96,192,256), fp16 and bf16, causal or not, 1k / 4k /
16k (1k first: where the epilogue's share of the kernel is largest; a cut budget loses 16k bf16 last); --plan smoke: one
row (hdim 128, fp16, non-causal, 1k).

    python3 benchmarks/hopper_bwd_dkv_tma/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_dkv_tma/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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

ARMS = ["base", "dkvtma"]
HDIMS = [int(h) for h in os.environ.get("HDIMS", "64,128").split(",")]
BUILD = dict(hdim=",".join(map(str, HDIMS)), dtype="fp16,bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {"base": [(BUILD, [])], "dkvtma": [(BUILD, [f"{ab.D}DKV_TMA=1"])]}


def plan_rows(plan):
    if plan == "smoke":
        return [(128, "fp16", False, 1024, ARMS)]
    return [(hdim, dt, causal, s, ARMS) for s in (1024, 4096, 16384) for dt in ("fp16", "bf16") for hdim in HDIMS
            for causal in (False, True)]


ab.plan_rows = plan_rows

if __name__ == "__main__":
    ab.main(sys.argv[1:])
