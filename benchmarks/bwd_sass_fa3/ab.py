"""dV early (kernels/hopper/bwd_mainloop.h at commit 12916e5, kDvEarly: the exponentials under dP^T's product; it
lost, 0.929-0.978x, and left main, so run this from that checkout) A/B-timed against the tree's defaults at hdim 128, through the backward step harness of ../hopper_bwd_uniform/ab.py (its checks: every arm's
gradients bitwise equal to base's in deterministic mode, dense and packed, and within --tol in the default mode; its
turns with SDPA cuDNN; its table and ab.json), with this study's arms and rows:
  base  the tree's defaults
  dve   -DFLASHBUILD_HOPPER_BWD_DV_EARLY=1
Rows: hdim 128, fp16 and bf16, causal or not, 16k / 4k / 1k (16k first: a cut budget loses 1k bf16 last);
--plan smoke: one row (fp16, non-causal, 4k).

    python3 benchmarks/bwd_sass_fa3/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/bwd_sass_fa3/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

_HARNESS = pathlib.Path(__file__).resolve().parent.parent / "hopper_bwd_uniform" / "ab.py"
_spec = importlib.util.spec_from_file_location("hopper_bwd_uniform_ab", _HARNESS)
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
ab.__doc__ = __doc__  # its --help describes this study

ARMS = ["base", "dve"]
BUILD = dict(hdim="128", dtype="fp16,bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {"base": [(BUILD, [])], "dve": [(BUILD, [f"{ab.D}DV_EARLY=1"])]}


def plan_rows(plan):
    if plan == "smoke":
        return [(128, "fp16", False, 4096, ARMS)]
    return [(128, dt, causal, s, ARMS) for s in (16384, 4096, 1024) for dt in ("fp16", "bf16") for causal in (False, True)]


ab.plan_rows = plan_rows

if __name__ == "__main__":
    ab.main(sys.argv[1:])
