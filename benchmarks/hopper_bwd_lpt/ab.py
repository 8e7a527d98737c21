"""The causal Hopper backward's grid longest first across sections of heads (kernels/hopper/bwd_params.h,
bwd_lpt_section; nvcc -DFLASHBUILD_HOPPER_BWD_LPT_SECTION=<n> for every head dim of a build), timed in turns against
the grid's own order (base: =0) through the backward step harness of ../hopper_bwd_uniform/ab.py, with SDPA cuDNN in
the same turns. Its checks, unchanged: in deterministic mode the form's dQ, dK, dV bitwise equal to base's (the ordered
kernel is not remapped) and to a second run, in default mode within --tol + 2 ulp, on odd dense and packed shapes,
causal or not; each timed row's gradients within --tol of base's. Arms on this tree (the default since h200-5: g4 at
head dims 64 and 128, g8 at 256; base spells the grid's own order out):
  base   =0: the grid's own order (each (batch, head)'s key blocks 0, 1, ... together)
  g2, g4, g8 =2 / 4 / 8: the launch lays the grid out in sections of up to 2 / 4 / 8 heads of one batch, and the
         kernel shifts and masks blockIdx                                           (no argument; h200-5: `grid`)
  tree   no define: the tree's own sections (4 heads, 8 at hdim 256)
The argument `softcap` (h200-9): base and tree on builds with the feature kernels (local and softcap compiled in),
every call with softcap 30, so that each row runs a feature kernel.
Arms of the remap form, taken out after h200-5 (they refuse here, naming 02a586b, the last commit with it):
  lpt    =-2: sections of as many (batch, head) pairs as fit in 40 MB of L2 (FA3's order)   (h200-1)
  s2, s4 =2 / =4: sections of 2 / 4 pairs                                            (h200-2: the argument `sections`)
  wave   =-1: sections of about one wave of CTAs, 132 / key blocks pairs             (h200-2: the argument `sections`)
  grid   (h200-5: base, s4, and g4 / g8 under -DFLASHBUILD_HOPPER_BWD_LPT_GRID=1)
Rows (plan stats): fp16, causal, hdim 64 / 128 / 256 at 4k, 16k, 1k (4k first: the rows the study is about), and
hdim 128 non-causal at 4k (not remapped: a control); --plan smoke: one row (hdim 128 causal 4k). The argument `odd`
(h200-7): hdim 96 and 192 instead, at a model dim of 3072 (32 and 16 heads), hdim 96 non-causal the control.
h200-1 and h200-2 ran at 555ba2a and 344b697, whose defines differ (LONGEST_FIRST=1 then LPT_SECTION 0 = L2, -1 wave,
n pairs).

    python3 benchmarks/hopper_bwd_lpt/ab.py [odd] [softcap] --out OUT [--plan stats|smoke] [--rounds 5] [--reps 20]
        [--budget 200]
    python3 benchmarks/hopper_bwd_lpt/ab.py [odd] [softcap] --print-builds   # `name flashbuild-args`, one a build
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

HDIMS = (64, 128, 256)
if "odd" in sys.argv:  # hdim 96 and 192 at a model dim of 3072: 32 and 16 heads (2048 gives them 21 and 10)
    sys.argv.remove("odd")
    HDIMS, ab.MODEL_DIM = (96, 192), 3072
SEL = dict(hdim=",".join(map(str, HDIMS)), dtype="fp16", causal="both")
ARM_FLAGS = {arm: [f"{ab.D}LPT_SECTION={n}"] for arm, n in (("base", 0), ("g2", 2), ("g4", 4), ("g8", 8))}
ARM_FLAGS["tree"] = []  # the tree's own sections
ARMS = ["base", "g4", "g8"]
if "softcap" in sys.argv:  # the feature kernels (local and softcap compiled in), every call with softcap 30
    sys.argv.remove("softcap")
    ARMS, ab.FEATURES, ab.CALL_KW = ["base", "tree"], ["local", "softcap"], {"softcap": 30.0}
REMAP_ARMSETS = ("sections", "grid")  # and the argument-less base / lpt of h200-1: the remap form, at 02a586b
if any(a in REMAP_ARMSETS for a in sys.argv[1:]):
    ab.refuse_without_form(sys.argv[1:], "hopper_bwd_lpt", False, "remap of the causal backward's CTA index "
                           "(longest_first_cta)", "02a586b",
                           why="the launch's grid in the same order replaced it")
    sys.argv = [a for a in sys.argv if a not in REMAP_ARMSETS]
ab.PLANS["stats"] = {arm: [(SEL, ARM_FLAGS[arm])] for arm in ARMS}


def plan_rows(plan):
    control = 128 if 128 in HDIMS else HDIMS[0]
    if plan == "smoke":
        return [(control, "fp16", True, 4096, ARMS)]
    rows = [(h, "fp16", True, s, ARMS) for s in (4096, 16384, 1024) for h in HDIMS]
    return rows[:len(HDIMS)] + [(control, "fp16", False, 4096, ARMS)] + rows[len(HDIMS):]


ab.plan_rows = plan_rows

if __name__ == "__main__":
    ab.main(sys.argv[1:])
