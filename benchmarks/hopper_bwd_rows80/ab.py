"""The rows-80 form of the Hopper backward (kernels/hopper/bwd_rows80.h, -DFLASHBUILD_HOPPER_BWD_ROWS80=1: FA3's 80 x
128 non-causal hdim-128 tile, dQ computed transposed; it lost in call h200-1, 0.941-0.978x, and left main: run this
from the last commit that has it, a5a0daf) A/B-timed against the tree's defaults, through the backward step
harness of ../hopper_bwd_uniform/ab.py (its checks: every arm's gradients bitwise equal to base's in deterministic
mode, dense and packed, and to a second run of the arm, and within --tol of base's in the default mode; its turns with
SDPA cuDNN; its table and ab.json), with this study's arms and rows:
  base  the tree's defaults
  r80   -DFLASHBUILD_HOPPER_BWD_ROWS80=1 (one dQ hand-off for both warpgroups, one bulk reduction a block)
  r80h  -DFLASHBUILD_HOPPER_BWD_ROWS80=2 (each warpgroup's half handed on alone, as the default's; 2 KB reductions)
Rows: hdim 128, fp16 and bf16, non-causal (the form's kernels; causal is the same kernel in both arms and runs as a
control at 16k), 16k / 4k / 1k (16k first: a cut budget loses 1k bf16 last); --plan smoke: one row (fp16, 4k).

    python3 benchmarks/hopper_bwd_rows80/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_rows80/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
"""
from __future__ import annotations

import importlib.util
import pathlib
import sys

_REPO = pathlib.Path(__file__).resolve().parents[2]
_HARNESS = _REPO / "benchmarks" / "hopper_bwd_uniform" / "ab.py"
# The form's last commit: on a tree without it the r80 / r80h arms would build the defaults under another name.
LAST_COMMIT = "a5a0daf"
_spec = importlib.util.spec_from_file_location("hopper_bwd_uniform_ab", _HARNESS)
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
ab.__doc__ = __doc__  # its --help describes this study

ARMS = ["base", "r80", "r80h"]
BUILD = dict(hdim="128", dtype="fp16,bf16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {"base": [(BUILD, [])], "r80": [(BUILD, [f"{ab.D}ROWS80=1"])],
                     "r80h": [(BUILD, [f"{ab.D}ROWS80=2"])]}


def plan_rows(plan):
    if plan == "smoke":
        return [(128, "fp16", False, 4096, ARMS)]
    rows = [(128, dt, False, s, ARMS) for s in (16384, 4096, 1024) for dt in ("fp16", "bf16")]
    return rows[:2] + [(128, "fp16", True, 16384, ARMS)] + rows[2:]


ab.plan_rows = plan_rows


if __name__ == "__main__":
    ab.refuse_without_form(sys.argv[1:], "hopper_bwd_rows80", (_REPO / "kernels" / "hopper" / "bwd_rows80.h").is_file(),
                           "rows-80 form (kernels/hopper/bwd_rows80.h)", LAST_COMMIT)
    ab.main(sys.argv[1:])
