"""The backward producer's LSE and dsum loaded one query block ahead (kernels/hopper/bwd_producer.h, kStatsAhead;
-DFLASHBUILD_HOPPER_BWD_STATS_AHEAD=1) A/B-timed against the tree's defaults at hdim 64 and 128, through the backward
step harness of ../hopper_bwd_uniform/ab.py (its checks: the arm's gradients bitwise equal to base's in deterministic
mode, dense and packed, and within --tol in the default mode; its turns with SDPA cuDNN; its table and ab.json):
  base   the tree's defaults (each block's stats loaded after the wait for its stage, then stored)
  ahead  -DFLASHBUILD_HOPPER_BWD_STATS_AHEAD=1 (loaded into registers one block ahead, stored once the stage is free)
Rows: hdim 64 and 128, fp16, causal or not, 16k / 4k / 1k (16k first); --plan smoke: one row (hdim 64, causal, 4k).

    python3 benchmarks/hopper_bwd_stats_ahead/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_stats_ahead/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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

ARMS = ["base", "ahead"]
FORMS = {"base": [], "ahead": [f"{ab.D}STATS_AHEAD=1"]}
BUILD = dict(hdim="64,128", dtype="fp16", causal="both")
ab.PLANS["stats"] = {arm: [(BUILD, flags)] for arm, flags in FORMS.items()}


def plan_rows(plan):
    if plan == "smoke":
        return [(64, "fp16", True, 4096, ARMS)]
    return [(h, "fp16", causal, s, ARMS) for s in (16384, 4096, 1024) for h in (64, 128) for causal in (False, True)]


ab.plan_rows = plan_rows

_REPO = pathlib.Path(__file__).resolve().parents[2]
LAST_COMMIT = "9c47a5c"  # the last commit with the form


if __name__ == "__main__":
    has_form = "STATS_AHEAD" in (_REPO / "kernels" / "hopper" / "bwd_producer.h").read_text()
    ab.refuse_without_form(sys.argv[1:], "hopper_bwd_stats_ahead", has_form,
                           "-DFLASHBUILD_HOPPER_BWD_STATS_AHEAD form (kernels/hopper/bwd_producer.h)", LAST_COMMIT)
    ab.main(sys.argv[1:])
