"""The exponentials under dP^T's product (kernels/hopper/bwd_mainloop.h, kExpUnderDp;
-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP; it lost in call h200-1, pin 0.912-0.954x, half 0.963-0.993x, and left main: run
this from the last commit that has it, c5aa03e) A/B-timed against the tree's defaults at hdim 128, through the backward
step harness of ../hopper_bwd_uniform/ab.py (its checks: every arm's gradients bitwise equal to base's in deterministic mode, dense and packed, and within --tol in
the default mode; its turns with SDPA cuDNN; its table and ab.json), with this study's arms and rows:
  base  the tree's defaults (1 of 32 exponentials under dP^T's product in the SASS)
  pin   -DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=1 (all 32 under it, dV's product issued right after the wait)
  half  -DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=3 (16 under it, FA3's 13-14)
Rows: hdim 128, fp16 and bf16, causal or not, 16k / 4k / 1k (16k first, fp16 before bf16 at each length: a cut budget
loses the short rows); --plan smoke: one row (fp16, non-causal, 4k).

    python3 benchmarks/hopper_bwd_exp_under_dp/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_exp_under_dp/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

_REPO = pathlib.Path(__file__).resolve().parents[2]
_HARNESS = _REPO / "benchmarks" / "hopper_bwd_uniform" / "ab.py"
# The form's last commit: on a tree without it the pin / half arms would build the defaults under another name.
LAST_COMMIT = "c5aa03e"
_spec = importlib.util.spec_from_file_location("hopper_bwd_uniform_ab", _HARNESS)
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
ab.__doc__ = __doc__  # its --help describes this study

ARMS = ["base", "pin", "half"]
FORMS = {"base": [], "pin": [f"{ab.D}EXP_UNDER_DP=1"], "half": [f"{ab.D}EXP_UNDER_DP=3"]}
# One build per dtype, so that run.sh's `flashbuild test` of an fp16 one finds it built (the same selection).
FP16, BF16 = dict(hdim="128", dtype="fp16", causal="both"), dict(hdim="128", dtype="bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {arm: [(FP16, flags), (BF16, flags)] for arm, flags in FORMS.items()}


def plan_rows(plan):
    if plan == "smoke":
        return [(128, "fp16", False, 4096, ARMS)]
    return [(128, dt, causal, s, ARMS) for s in (16384, 4096, 1024) for dt in ("fp16", "bf16") for causal in (False, True)]


ab.plan_rows = plan_rows


if __name__ == "__main__":
    ab.refuse_without_form(sys.argv[1:], "hopper_bwd_exp_under_dp", (_REPO / "kernels" / "hopper" / "bwd_exp_under_dp.h").is_file(),
                           "exponentials-under-dP^T form (kernels/hopper/bwd_exp_under_dp.h)", LAST_COMMIT)
    ab.main(sys.argv[1:])
