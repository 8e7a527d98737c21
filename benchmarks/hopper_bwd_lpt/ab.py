"""The causal Hopper backward's grid longest first across heads (kernels/hopper/bwd_kernel.h, longest_first_cta;
-DFLASHBUILD_HOPPER_BWD_LONGEST_FIRST=1), timed in turns against the grid's own order (base: no flag, the default)
through the backward step harness of ../hopper_bwd_uniform/ab.py, with SDPA cuDNN in the same turns. Its checks,
unchanged: in deterministic mode the form's dQ, dK, dV bitwise equal to base's (the ordered kernel is not remapped)
and to a second run, in default mode within --tol + 2 ulp, on odd dense and packed shapes, causal or not; each timed
row's gradients within --tol of base's. Arms:
  base   the grid's own order (each (batch, head)'s key blocks 0, 1, ... together)
  lpt    key block 0 of every (batch, head) of an L2-sized section first, then key block 1, ... (FA3's order)
  s2, s4 sections of 2 / 4 (batch, head) pairs (-DFLASHBUILD_HOPPER_BWD_LPT_SECTION=2 / 4)   (the argument `sections`)
  wave   sections of about one wave of CTAs, 132 / key blocks pairs (LPT_SECTION=-1)        (the argument `sections`)
Rows (plan stats): fp16, causal, hdim 64 / 128 / 256 at 4k, 16k, 1k (4k first: the rows the study is about), and
hdim 128 non-causal at 4k (not remapped: a control); --plan smoke: one row (hdim 128 causal 4k).

    python3 benchmarks/hopper_bwd_lpt/ab.py [sections] --out OUT [--plan stats|smoke] [--rounds 5] [--reps 20] [--budget 200]
    python3 benchmarks/hopper_bwd_lpt/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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

SEL = dict(hdim="64,128,256", dtype="fp16", causal="both")
LPT = f"{ab.D}LONGEST_FIRST=1"
# h200-1 ran base and lpt; h200-2 (--arms-set sections) base, s2, s4 and wave.
ARM_FLAGS = {"base": [], "lpt": [LPT], "s2": [LPT, f"{ab.D}LPT_SECTION=2"], "s4": [LPT, f"{ab.D}LPT_SECTION=4"],
             "wave": [LPT, f"{ab.D}LPT_SECTION=-1"]}
ARMS = ["base", "s2", "s4", "wave"] if "sections" in sys.argv else ["base", "lpt"]
if "sections" in sys.argv:
    sys.argv.remove("sections")
ab.PLANS["stats"] = {arm: [(SEL, ARM_FLAGS[arm])] for arm in ARMS}


def plan_rows(plan):
    if plan == "smoke":
        return [(128, "fp16", True, 4096, ARMS)]
    rows = [(h, "fp16", True, s, ARMS) for s in (4096, 16384, 1024) for h in (64, 128, 256)]
    return rows[:3] + [(128, "fp16", False, 4096, ARMS)] + rows[3:]


ab.plan_rows = plan_rows

_REPO = pathlib.Path(__file__).resolve().parents[2]
LAST_COMMIT = "555ba2a"  # the last commit with the form


if __name__ == "__main__":
    has_form = "LONGEST_FIRST" in (_REPO / "kernels" / "hopper" / "bwd_kernel.h").read_text()
    ab.refuse_without_form(sys.argv[1:], "hopper_bwd_lpt", has_form,
                           "-DFLASHBUILD_HOPPER_BWD_LONGEST_FIRST form (kernels/hopper/bwd_kernel.h)", LAST_COMMIT)
    ab.main(sys.argv[1:])
