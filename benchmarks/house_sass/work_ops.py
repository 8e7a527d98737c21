"""Where two sass_tree.py dumps of a kernel differ, by kind of instruction: for a change meant to remove integer and
control code alone (a runtime branch that was never taken by default), show that nothing else moved.

    python3 benchmarks/house_sass/work_ops.py BEFORE_DIR AFTER_DIR

For each function of each <tu>.sass (split as compare.py splits them): its instruction count before and after; the
opcodes whose count changed (the removed code's, e.g. the 64-bit division's CALL/RET and I2F.U64); and its work
instructions, those that touch memory, barriers, the tensor cores or floating point (WORK below: HGMMA, TMA, SYNCS,
loads and stores, atomics, fences, FFMA/FMUL/..., MUFU.EX2, SHFL, setmaxnreg), as an ordered list: `same` (the same
opcodes in the same order), or `same multiset, N local moves` (the same opcodes and counts; N instructions changed
places, each named with its index) or `DIFFERS` (an opcode count changed). MUFU.RCP, I2F and F2I are not work here:
the integer division idiom uses them. Functions are matched by name (a TU's one unmatched function on each side as
renamed). Exits 1 if a work-instruction count differs anywhere, a function is on one side only or a TU was not built
after; 2 if BEFORE holds no dump.
"""

from __future__ import annotations

import collections
import difflib
import re
import sys
from pathlib import Path

from compare import functions

OPCODE = re.compile(r"(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]+)")
WORK = re.compile(r"(HGMMA|WARPGROUP|UTMA|UBLKCP|SYNCS|LDG|LDS|LDSM|STG|STS|STSM|STAS|RED|ATOM|MEMBAR|FENCE|ERRBAR|"
                  r"BAR|CCTL|DEPBAR|UCGABAR|FFMA|FMUL|FADD|FMNMX|FSETP|FSEL|F2FP|HADD2|HMUL2|HFMA2|MUFU\.EX2|"
                  r"MUFU\.LG2|SHFL|USETMAXREG|ELECT|EXIT)(?:\.[A-Z0-9_.]*)?")  # with any modifiers


def opcodes(lines: list[str]) -> list[str]:
    return [m.group(1) for m in (OPCODE.match(line) for line in lines) if m]


def main(before: Path, after: Path) -> int:
    dumps = sorted(before.glob("*.sass"))
    if not dumps:
        print(f"no <tu>.sass in {before}: give the dirs sass_tree.py built (their sass/ is read)", file=sys.stderr)
        return 2
    bad = 0
    for sass in dumps:
        other = after / sass.name
        if not other.is_file():
            print(f"{sass.stem}: not built after")
            bad += 1
            continue
        old, new = functions(sass.read_text(), False), functions(other.read_text(), False)
        pairs = [(name, name) for name in sorted(old.keys() & new.keys())]
        gone, added = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
        if len(gone) == 1 and len(added) == 1:  # one kernel whose template arguments changed, as in compare.py
            pairs.append((gone[0], added[0]))
        else:
            for name in gone + added:
                print(f"{sass.stem}: only {'before' if name in old else 'after'}: {name.split('(')[0][:100]}")
                bad += 1  # nothing to compare is not "the same"
        for name, after_name in pairs:
            a, b = opcodes(old[name]), opcodes(new[after_name])
            ca, cb = collections.Counter(a), collections.Counter(b)
            changed = {op: cb[op] - ca[op] for op in sorted(ca.keys() | cb.keys()) if ca[op] != cb[op]}
            wa, wb = [op for op in a if WORK.fullmatch(op)], [op for op in b if WORK.fullmatch(op)]
            if wa == wb:
                work = f"same ({len(wa)})"
            elif collections.Counter(wa) == collections.Counter(wb):
                moves = [(i, wa[i1:i2]) for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, wa, wb, autojunk=False)
                         .get_opcodes() if tag != "equal" for i in [i1] if i2 > i1]
                work = (f"same multiset ({len(wa)}), {sum(len(ops) for _, ops in moves)} local moves: "
                        + "; ".join(f"{i}: {' '.join(ops)}" for i, ops in moves))
            else:
                cwa, cwb = collections.Counter(wa), collections.Counter(wb)
                added, removed = cwb - cwa, cwa - cwb
                work = f"DIFFERS: {dict(added)} added, {dict(removed)} removed"
                bad += 1
            short = name.split("(")[0][:100]
            print(f"{sass.stem}: {short}\n  instructions {len(a)} -> {len(b)}; work instructions {work}")
            if changed:
                print("  count changes: " + ", ".join(f"{op} {d:+d}" for op, d in changed.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]) / "sass", Path(sys.argv[2]) / "sass"))
