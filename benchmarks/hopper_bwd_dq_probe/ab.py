"""How much of the Hopper backward's time is dQ's reductions into dq_accum? A timing probe, not a form to keep
(kernels/hopper/bwd_epilogue.h, dq_reduces; -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=1: every reduction behind a test that
is false at run time, so the dQ product, its hand-off and barriers stay and the reductions' memory traffic goes; dQ
comes out zero). Timed in turns against the tree's defaults through the backward step harness of
../hopper_bwd_uniform/ab.py (its turns with SDPA cuDNN, its table and ab.json), with this study's checks in place of
the harness's: in deterministic and default mode the probe's dK and dV bitwise equal to base's (deterministic) and
within --tol + 2 ulp (default), its dQ exactly zero (the reductions did not run), and a second deterministic run of
the probe bitwise equal. Arms:
  base   the tree's defaults
  nodq   -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=1 (every kernel of the build, the deterministic twins too)
  halfdq -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=2: only the CTAs of even blockIdx.x (key block) reduce: half the traffic
  twodq  -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=3: the writer warp's bulk reductions issued twice: twice the traffic
$ARMS picks them (comma-separated, base first; default base,nodq). halfdq's and twodq's dQ is neither zero nor
base's: for them the check is dK / dV as above, a dQ not all zero, and a second deterministic run bitwise equal.
Rows: hdim 64, 128 and 256 (or the head dims in $HDIMS), fp16, causal or not, 1k / 4k / 16k (16k first: the
steady state, where the reductions' L2 traffic weighs most); --plan smoke: one row (hdim 256, non-causal, 4k).

    python3 benchmarks/hopper_bwd_dq_probe/ab.py --out OUT [--plan stats|smoke] [--rounds 3] [--reps 20] [--budget 120]
    python3 benchmarks/hopper_bwd_dq_probe/ab.py --print-builds   # `name flashbuild-arguments`, one line a build
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

PROBES = {"nodq": 1, "halfdq": 2, "twodq": 3}
ARMS = os.environ.get("ARMS", "base,nodq").split(",")
if ARMS[0] != "base" or any(a not in PROBES for a in ARMS[1:]):
    sys.exit(f"ARMS={','.join(ARMS)}: base first, then any of {', '.join(PROBES)}")
HDIMS = [int(h) for h in os.environ.get("HDIMS", "64,128,256").split(",")]
BUILD = dict(hdim=",".join(map(str, HDIMS)), dtype="fp16", causal="both")
# The harness's default plan (`stats`) carries this study's arms; its other plans are left as they are.
ab.PLANS["stats"] = {"base": [(BUILD, [])], **{a: [(BUILD, [f"{ab.D}PROBE_NO_DQ={PROBES[a]}"])] for a in ARMS[1:]}}
_within = ab.within


def plan_rows(plan):
    if plan == "smoke":
        return [(256, "fp16", False, 4096, ARMS)]
    return [(hdim, "fp16", causal, s, ARMS) for s in (16384, 4096, 1024) for hdim in HDIMS for causal in (False, True)]


def within_dkv(torch, base_grads, new_grads, tol):
    """The timed rows' check: dK and dV as the harness checks them; dQ is the probe's zero."""
    return _within(torch, base_grads[1:], new_grads[1:], tol)


# The probe level of each build the harness loads (its module's id -> -DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ's value, 0
# without it), recorded by wrapping flashbuild.load: the harness hands compare() the module, not the arm's name.
_PROBE_OF: dict[int, int] = {}


def _recording(load):
    def wrapped(**kw):
        module = load(**kw)
        levels = [int(f.rsplit("=", 1)[1]) for f in kw.get("nvcc_flags") or [] if "PROBE_NO_DQ=" in f]
        _PROBE_OF[id(module)] = levels[0] if levels else 0
        return module
    return wrapped


def compare(torch, base, new, args, what, causal, tol, varlen):
    det = [ab.grads(m, args, causal, True, varlen) for m in (base, new, new)]
    equal = all(torch.equal(x, y) for x, y in zip(det[0][1:], det[1][1:]))
    repeat = all(torch.equal(x, y) for x, y in zip(det[1], det[2]))
    fin = all(torch.isfinite(x).all().item() for x in det[1])
    dflt = [ab.grads(m, args, causal, False, varlen) for m in (base, new)]
    no_dq = all(not bool(g[0].any()) for g in (det[1], dflt[1]))
    # nodq (level 1) must leave dQ zero; halfdq / twodq (2, 3) must not (their reductions ran, to other values than
    # base's). A build of unknown level fails the check.
    level = _PROBE_OF.get(id(new))
    dq_ok = no_dq if level == 1 else (not no_dq if level in (2, 3) else False)
    diff = max((x.float() - y.float()).abs().max().item() if x.numel() else 0.0 for x, y in zip(dflt[0][1:], dflt[1][1:]))
    ok = equal and repeat and fin and dq_ok and _within(torch, dflt[0][1:], dflt[1][1:], tol)
    return {"shape": what, "deterministic_equal": equal, "deterministic_repeat": repeat, "finite": fin,
            "probe_level": level, "dq_zero": no_dq, "default_maxdiff": diff, "ok": ok}


ab.plan_rows = plan_rows
ab.within = within_dkv
ab.compare = compare

if __name__ == "__main__":
    if not {"-h", "--help", "--print-builds"} & set(sys.argv[1:]):  # those run without torch
        import flashbuild

        flashbuild.load = _recording(flashbuild.load)
    ab.main(sys.argv[1:])
