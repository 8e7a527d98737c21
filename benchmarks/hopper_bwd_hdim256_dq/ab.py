"""hdim 256's dQ off the consumers (kernels/hopper/bwd_traits.h, kDqInTurn; -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=1): the
writer warp's bulk reductions, each consumer warpgroup's half of dQ in turn through one 32 KB buffer, one dO stage.
Timed in turns against the consumers' red.global.add.v4.f32 (base: =0, the default before h200-1) through the backward
step harness of ../hopper_bwd_uniform/ab.py, with SDPA cuDNN in the same turns. Its checks, unchanged: in
deterministic mode the form's dQ, dK, dV bitwise equal to base's (each query block's adds in the same order: one fp32
add per element per key block, by a bulk reduction in place of an atomic) and to a second run of the form, in default
mode within --tol + 2 ulp, on odd dense and packed shapes; each timed row's gradients within --tol of base's. Arms:
  base   -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=0: the consumers' atomics (the default before h200-1, a91430f)
  turn   -DFLASHBUILD_HOPPER_BWD_HDIM256_DQ=1 (every kernel of the build, the deterministic twins too; the default since)
Rows: hdim 256, fp16 and bf16, causal or not, 16k / 4k / 1k (16k first, fp16 before bf16 at each length: a cut budget
loses the short rows); --plan smoke: one row (fp16, non-causal, 4k).

    python3 benchmarks/hopper_bwd_hdim256_dq/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_hdim256_dq/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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

ARMS = ["base", "turn"]
FLAG = f"{ab.D}HDIM256_DQ=1"
BASE = f"{ab.D}HDIM256_DQ=0"  # the form is the default since h200-1: base spells the atomics out
# One build per dtype, so that run.sh's `flashbuild test` of the fp16 one finds it built (the same selection).
FP16, BF16 = dict(hdim="256", dtype="fp16", causal="both"), dict(hdim="256", dtype="bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {"base": [(FP16, [BASE]), (BF16, [BASE])], "turn": [(FP16, [FLAG]), (BF16, [FLAG])]}


def plan_rows(plan):
    if plan == "smoke":
        return [(256, "fp16", False, 4096, ARMS)]
    return [(256, dt, causal, s, ARMS) for s in (16384, 4096, 1024) for dt in ("fp16", "bf16") for causal in (False, True)]


ab.plan_rows = plan_rows

if __name__ == "__main__":
    ab.main(sys.argv[1:])
