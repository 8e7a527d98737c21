#!/usr/bin/env python3
"""Is a backward kernel's step the same in two `cuobjdump -sass` dumps, instruction for instruction?

Finds each main backward kernel's step (the loop with 16 or more HGMMA, ../bwd_sass_fa3/bwd_steps.py's reading) in
both files, drops the instruction offsets and branch targets, and compares the steps' instruction text, registers
as written and, with --rename, registers and predicates read as one name (so that a step only register-renamed
reads the same). Prints, per kernel: the step's length in each and `same` or the changed runs (--show N: the first N
of them). Exit 1 if any step differs.

    python3 benchmarks/hopper_bwd_bench_turns/step_diff.py BEFORE.sass AFTER.sass [--rename] [--show N]
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fwd_sass_fa3"))
import sass_loops as sl  # noqa: E402

MAIN_KERNELS = ("bwd_kernel", "FlashAttnBwdSm90")
TARGET = re.compile(r"0x[0-9a-f]+|`\(\.L_x_\d+\)")
REGISTER = re.compile(r"\bU?R\d+\b|\bU?P\d\b")


def step(insns: list[sl.Insn]) -> list[sl.Insn]:
    blocks = sl.build_cfg(insns)
    dom = sl.dominators(blocks)
    loops = [sl.loop_insns(insns, blocks, lp) for lp in sl.natural_loops(blocks, dom)]
    steps = [body for body in loops if sum(x.op.startswith("HGMMA") for x in body) >= 16]
    return max(steps, key=len) if steps else []


def text(body: list[sl.Insn], rename: bool) -> list[str]:
    out = []
    for x in body:
        t = x.text if not x.op.startswith("BRA") else TARGET.sub("T", x.text)
        out.append(REGISTER.sub("R", t) if rename else t)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rename", action="store_true", help="registers and predicates read as one name")
    ap.add_argument("--show", type=int, default=0, help="print the first N changed runs of a differing step")
    a = ap.parse_args(argv)
    before, after = sl.read_functions(a.before), sl.read_functions(a.after)
    names = [n for n in before if any(k in n for k in MAIN_KERNELS)]
    if not names:
        print(f"{a.before}: no main backward kernel", file=sys.stderr)
        return 1
    differs = False
    for name in names:
        if name not in after:
            print(f"{name[:100]}: only in {a.before}")
            differs = True
            continue
        x, y = text(step(before[name]), a.rename), text(step(after[name]), a.rename)
        runs = [o for o in difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes() if o[0] != "equal"]
        verdict = "same" if not runs else f"{len(runs)} runs differ"
        print(f"{name[:100]}: step {len(x)} / {len(y)} instructions, {verdict}")
        for tag, i1, i2, j1, j2 in runs[:a.show]:
            print(f"  {tag}: {x[i1:i2][:6]} -> {y[j1:j2][:6]}")
        differs |= bool(runs)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
