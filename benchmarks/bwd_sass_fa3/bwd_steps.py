#!/usr/bin/env python3
"""The consumer steps of a Hopper backward kernel in `cuobjdump -sass` output, ours or FA3's, side by side.

Reuses the forward study's loop finder (../fwd_sass_fa3/sass_loops.py: the control-flow graph, natural loops,
the blocks every iteration runs) and counts what a backward step is made of: each wgmma product (HGMMA runs,
their shape and whether A is in registers, RS, or shared memory, SS), wgmma waits, named barriers by id,
mbarrier waits and arrivals, the LSE / dsum loads (LDS), shuffles, the dS / dQ stores (STSM, STS), the dQ
reductions (RED / ATOM, bulk UBLKRED), R2UR moves, local memory (spills), the mask's ISETP / FSEL, and the
timeline of those events in address order.

    python3 bwd_steps.py KERNEL.sass [--function SUBSTRING] [--all] [--list]

--all: every main backward kernel of the file (ours: `bwd_kernel`, FA3: `FlashAttnBwdSm90`); a loop is a step
when it holds at least 16 HGMMA (the producer's and dQ writer's loops are printed too, shorter).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fwd_sass_fa3"))
import sass_loops as sl  # noqa: E402

MAIN_KERNELS = ("bwd_kernel", "FlashAttnBwdSm90")

# (label, opcode prefix) counted per loop, in this order.
COUNTED = [
    ("HGMMA", "HGMMA"), ("DEPBAR", "WARPGROUP.DEPBAR"), ("BAR.SYNC", "BAR.SYNC"), ("BAR.ARV", "BAR.ARV"),
    ("MBAR.WAIT", "SYNCS.PHASECHK"), ("MBAR.ARRIVE", "SYNCS.ARRIVE"), ("MUFU.EX2", "MUFU.EX2"), ("FMUL", "FMUL"),
    ("FFMA", "FFMA"), ("FADD", "FADD"), ("F2FP", "F2FP"), ("LDS", "LDS"), ("LDSM", "LDSM"), ("STS", "STS"),
    ("STSM", "STSM"), ("SHFL", "SHFL"), ("RED", "RED"), ("ATOM", "ATOM"), ("UBLKRED", "UBLKRED"),
    ("R2UR", "R2UR"), ("LDL", "LDL"), ("STL", "STL"), ("ISETP", "ISETP"), ("FSEL", "FSEL"), ("FENCE", "FENCE"),
    ("MEMBAR", "MEMBAR"), ("LDG", "LDG"), ("UTMALDG", "UTMALDG"),
]
VECTOR_INT = ("IMAD", "VIADD", "LOP3", "SHF", "LEA", "IADD3", "MOV", "SEL", "PRMT")
UNIFORM = ("UIADD3", "UMOV", "ULEA", "UIMAD", "ULOP3", "USHF", "USEL", "ULDC", "UISETP")


def hgmma_kind(x: sl.Insn) -> str:
    """HGMMA.64xNx16 as `SS n` or `RS n` (A from shared memory by descriptor, or from registers)."""
    shape = x.op.split(".")[1]  # 64x128x16
    a = x.text.split(",")[1].strip()
    return ("SS" if a.startswith("gdesc") else "RS") + " " + shape.split("x")[1]


def event(x: sl.Insn) -> str | None:
    op, t = x.op, x.text
    if op.startswith("HGMMA"):
        return hgmma_kind(x)
    if op.startswith("WARPGROUP.DEPBAR"):
        return "WAIT" + t.split(",")[-1].strip()[-1]
    if op.startswith("BAR.SYNC") or op.startswith("BAR.ARV"):
        arg = t.split(None, 2 if x.pred else 1)[-1].strip()
        return op.split(".")[0] + "." + op.split(".")[1] + "(" + arg.split(",")[0] + ")"
    if op.startswith("SYNCS.PHASECHK"):
        return "MBAR.WAIT"
    if op.startswith("SYNCS.ARRIVE"):
        return "MBAR.ARRIVE"
    for k in ("MUFU.EX2", "LDS", "LDSM", "STSM", "STS", "SHFL", "RED", "ATOM", "UBLKRED", "LDL", "STL", "FENCE", "MEMBAR",
              "UTMALDG", "LDG", "R2UR"):
        if op.startswith(k):
            return k
    return None


def counts(body: list[sl.Insn]) -> Counter:
    c: Counter = Counter()
    c["insns"] = len(body)
    for x in body:
        for label, prefix in COUNTED:
            if x.op.startswith(prefix):
                c[label] += 1
                break
        if x.op.split(".")[0] in VECTOR_INT:
            c["vint"] += 1
        if x.op.split(".")[0] in UNIFORM:
            c["uniform"] += 1
        if x.op.startswith("HGMMA"):
            c["HGMMA " + hgmma_kind(x)] += 1
        if x.op.startswith("BAR."):
            c[event(x) or x.op] += 1
    return c


def timeline(body: list[sl.Insn]) -> str:
    parts: list[str] = []
    run, n, alu = None, 0, 0
    for x in body:
        k = event(x)
        if k is None:
            alu += 1
            continue
        if k == run:
            n += 1
            continue
        if run:
            parts.append(run + (f"x{n}" if n > 1 else ""))
        if alu:
            parts.append(f"[{alu}]")
            alu = 0
        run, n = k, 1
    if run:
        parts.append(run + (f"x{n}" if n > 1 else ""))
    if alu:
        parts.append(f"[{alu}]")
    return " ".join(parts)


def order(body: list[sl.Insn]) -> str:
    """Where a step's waits and hand-offs sit (instruction indices in the body): the mbarrier waits, the first SS and
    RS products, the wgmma waits, how many exponentials run between the wait for S^T (the first WAIT1) and the wait
    for dP^T (the first WAIT0), i.e. under dP^T's product, whether dS^T's stmatrix comes before the first RS product
    (dV's) is issued, the dS barrier and the dQ hand-off's barrier sync."""
    ks = [event(x) for x in body]

    def at(pred, start=0):
        return next((i for i in range(start, len(ks)) if ks[i] and pred(ks[i])), None)

    w1 = at(lambda k: k == "WAIT1")
    w0 = at(lambda k: k == "WAIT0", w1 or 0)
    under = sum(1 for k in ks[w1:w0] if k == "MUFU.EX2") if w1 is not None and w0 is not None else 0
    rs = at(lambda k: k.startswith("RS"))
    stsm = at(lambda k: k == "STSM")
    mb = [i for i, k in enumerate(ks) if k == "MBAR.WAIT"]
    bars = [f"{k}@{i}" for i, k in enumerate(ks) if k and k.startswith("BAR.")]
    return (f"MBAR.WAIT at {mb}, first SS at {at(lambda k: k.startswith('SS'))}, WAIT1 at {w1}, WAIT0 at {w0}: "
            f"EX2 {ks.count('MUFU.EX2')}, {under} of them between (under dP^T); first STSM at {stsm}, first RS at {rs} "
            f"(dS^T stored {'before' if stsm is not None and rs is not None and stsm < rs else 'after'} dV is issued); "
            f"barriers {' '.join(bars)}")


def fmt(c: Counter) -> str:
    keys = ["insns"] + [k for k, _ in COUNTED] + ["vint", "uniform"]
    main = ", ".join(f"{k} {c[k]}" for k in keys if c.get(k))
    extra = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k.startswith(("HGMMA ", "BAR.SYNC(", "BAR.ARV(")))
    return main + ("; " + extra if extra else "")


def report(name: str, insns: list[sl.Insn], min_hgmma: int) -> None:
    blocks = sl.build_cfg(insns)
    dom = sl.dominators(blocks)
    loops = sl.natural_loops(blocks, dom)
    body_all = [x for x in insns if x.op != "NOP"]
    print(f"function {name[:150]}{'...' if len(name) > 150 else ''}")
    print("  whole kernel: " + fmt(counts(body_all)))
    for lp in sorted(loops, key=lambda l: blocks[l.header].start):
        body = sl.loop_insns(insns, blocks, lp)
        c = counts(body)
        # the producer's and the dQ writer's loops; not the few-instruction retry loops around one TMA issue
        interesting = c["HGMMA"] >= min_hgmma or ((c["UBLKRED"] or c["UTMALDG"] or c["LDG"]) and c["insns"] >= 20)
        if not interesting:
            continue
        lo, hi = insns[blocks[lp.header].start].addr, insns[blocks[lp.latch].end - 1].addr
        always = sl.loop_insns(insns, blocks, lp, dom)
        print(f"  loop 0x{lo:x}-0x{hi:x} ({'step' if c['HGMMA'] >= min_hgmma else 'producer / dQ writer'})")
        print("    all paths: " + fmt(c))
        print("    every iteration: " + fmt(counts(always)))
        if c["HGMMA"] >= min_hgmma:
            print("    order (every): " + order(always))
        print("    timeline (all):   " + timeline(body))
        print("    timeline (every): " + timeline(always))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("sass", help="a file of cuobjdump -sass output")
    ap.add_argument("--function", default="", help="a substring of the mangled kernel name")
    ap.add_argument("--all", action="store_true", help="every main backward kernel in the file")
    ap.add_argument("--list", action="store_true", help="list the file's functions and their sizes, then stop")
    ap.add_argument("--min-hgmma", type=int, default=16, help="HGMMA a loop needs to count as a step (default 16)")
    a = ap.parse_args(argv)
    funcs = sl.read_functions(a.sass)
    if not funcs:
        print(f"{a.sass}: no function with SASS in it (is it cuobjdump -sass output?)", file=sys.stderr)
        return 1
    if a.list:
        for name, ins in funcs.items():
            print(f"{len([x for x in ins if x.op != 'NOP']):6d} {name}")
        return 0
    if a.all:
        names = [n for n in funcs if any(k in n for k in MAIN_KERNELS) and a.function in n]
    else:
        names = [n for n in funcs if a.function in n][:1]
    if not names:
        print(f"no function matches; the file holds: " + ", ".join(funcs), file=sys.stderr)
        return 1
    for n in names:
        report(n, funcs[n], a.min_hgmma)
    return 0


if __name__ == "__main__":
    sys.exit(main())
