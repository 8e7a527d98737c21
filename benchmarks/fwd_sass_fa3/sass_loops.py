#!/usr/bin/env python3
"""The loops of one kernel in `cuobjdump -sass` output, as the forward's SASS comparison reads them.

For each natural loop of the chosen function (found from its control-flow graph: a back edge is a
branch to a block that dominates it; the out-of-line mbarrier retry stubs ptxas puts after the body
are left out of the counts): its address range, instruction count (NOPs aside), the counts of the
instructions that matter to the forward's main loop (HGMMA split into SS, Q K^T, and RS, P V; wgmma
waits; MUFU.EX2; named barriers; mbarrier waits and arrivals; FSEL, the mask), and its timeline: the
events in address order, runs of one kind collapsed, plain ALU work counted between them.

    python3 sass_loops.py KERNEL.sass [--function SUBSTRING] [--list] [--timeline] [--stalls]

--stalls adds, per loop, the stall cycles ptxas encoded in the every-iteration body's control words (bits 41-44 of
each instruction's second 64-bit word: the cycles the warp waits before it issues its next instruction, whatever the
operands' readiness), in all and by the instruction that carries them: one warp's issue time of a step if nothing
else held it (a static bound, not a measurement).

In a timeline, [n] counts the plain instructions since the last event printed (those between the
instructions of one collapsed run, e.g. the eight HGMMA of one product, go into the next bracket).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

_INSN = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNC = re.compile(r"^\s+Function : (\S+)")
_HI = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/\s*$")  # the line after an instruction: its encoding's second word
# `BRA P1, 0x...` (a predicate operand, guarded or not) is conditional too: ptxas writes two-predicate branches so.
_BRA = re.compile(r"^(@!?U?P\w+\s+)?BRA(\.\w+)*\s+(!?U?P\w+,\s*)?(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


@dataclass(frozen=True)
class Insn:
    addr: int
    text: str
    ctrl: int = -1  # the second 64-bit word of the encoding (its control bits), -1 where the file has none

    @property
    def stall(self) -> int:
        return (self.ctrl >> 41) & 0xF if self.ctrl >= 0 else 0

    @property
    def pred(self) -> str:
        return self.text.split()[0] if self.text.startswith("@") else ""

    @property
    def op(self) -> str:
        parts = self.text.split()
        return parts[1] if self.pred else parts[0]


def read_functions(path: str) -> dict[str, list[Insn]]:
    funcs: dict[str, list[Insn]] = {}
    cur = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _FUNC.match(line)
            if m:
                cur = funcs.setdefault(m.group(1), [])
                continue
            m = _INSN.match(line)
            if m and cur is not None:
                cur.append(Insn(int(m.group(1), 16), m.group(2)))
                continue
            m = _HI.match(line)
            if m and cur and cur[-1].ctrl < 0:
                last = cur[-1]
                cur[-1] = Insn(last.addr, last.text, int(m.group(1), 16))
    return funcs


def classify(i: Insn) -> str | None:
    """The event kind of an instruction, or None for plain work."""
    op, t = i.op, i.text
    if op.startswith("HGMMA"):
        return "QK" if "gdesc" in t.split(",")[1] else "PV"  # SS: both operands descriptors; RS: A in registers
    if op.startswith("WARPGROUP.DEPBAR"):
        return "WAIT" + t.split(",")[-1].strip()[-1]  # WAIT0 / WAIT1: wgmma.wait_group N
    if op.startswith("WARPGROUP.ARRIVE"):
        return None
    if op.startswith("MUFU.EX2"):
        return "EX2"
    if op.startswith("BAR.SYNC") or op.startswith("BAR.ARV") or op.startswith("BAR.RED"):
        return op.split(".")[0] + "." + op.split(".")[1] + "(" + t.split(None, 2 if i.pred else 1)[-1].strip() + ")"
    if op.startswith("SYNCS.PHASECHK"):
        return "MBAR.WAIT"
    if op.startswith("SYNCS.ARRIVE"):
        return "MBAR.ARRIVE"
    if op.startswith("FSEL"):
        return "FSEL"
    if op.startswith("F2FP"):
        return "F2FP"
    if op.startswith("SHFL"):
        return "SHFL"
    if op.startswith("FMNMX"):
        return "FMNMX"
    return None


@dataclass
class Block:
    start: int  # index into the function's instruction list
    end: int  # exclusive
    succ: list[int] = field(default_factory=list)


def build_cfg(insns: list[Insn]) -> list[Block]:
    by_addr = {x.addr: k for k, x in enumerate(insns)}
    leaders = {0}
    targets: dict[int, int] = {}
    for k, x in enumerate(insns):
        m = _BRA.match(x.text)
        if m and m.group(4):
            tgt = int(m.group(4), 16)
            if tgt in by_addr:
                targets[k] = by_addr[tgt]
                leaders.add(by_addr[tgt])
            leaders.add(k + 1)
        elif x.op in ("EXIT", "RET", "BRX", "JMX") or x.op.startswith("RET"):
            leaders.add(k + 1)
    starts = sorted(s for s in leaders if s < len(insns))
    blocks = [Block(s, e) for s, e in zip(starts, starts[1:] + [len(insns)])]
    index = {b.start: n for n, b in enumerate(blocks)}
    for n, b in enumerate(blocks):
        last = b.end - 1
        x = insns[last]
        m = _BRA.match(x.text)
        uncond = not x.pred and not (m and m.group(3))
        if last in targets:
            b.succ.append(index[targets[last]])
            if not uncond and n + 1 < len(blocks):
                b.succ.append(n + 1)
        elif x.op in ("EXIT",) and uncond:
            pass
        elif n + 1 < len(blocks):
            b.succ.append(n + 1)
    return blocks


def dominators(blocks: list[Block]) -> list[set[int]]:
    n = len(blocks)
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, b in enumerate(blocks):
        for v in b.succ:
            preds[v].append(u)
    full = set(range(n))
    dom = [full.copy() for _ in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for v in range(1, n):
            ps = [dom[p] for p in preds[v]]
            new = (set.intersection(*ps) if ps else set()) | {v}
            if new != dom[v]:
                dom[v] = new
                changed = True
    return dom


@dataclass
class Loop:
    header: int
    latch: int
    blocks: set[int]


def natural_loops(blocks: list[Block], dom: list[set[int]]) -> list[Loop]:
    preds: list[list[int]] = [[] for _ in range(len(blocks))]
    for u, b in enumerate(blocks):
        for v in b.succ:
            preds[v].append(u)
    loops = []
    for u, b in enumerate(blocks):
        for v in b.succ:
            if v in dom[u]:  # back edge u -> v
                body, stack = {v, u}, [u]
                while stack:
                    x = stack.pop()
                    for p in preds[x]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
                loops.append(Loop(v, u, body))
    return loops


def loop_insns(insns: list[Insn], blocks: list[Block], loop: Loop, dom: list[set[int]] | None = None) -> list[Insn]:
    """The loop's instructions inside its address range [header, back edge] (the retry stubs of mbarrier
    waits lie after the body); with dom, only the blocks every iteration runs (those dominating the latch)."""
    lo, hi = blocks[loop.header].start, blocks[loop.latch].end
    out = []
    for n in sorted(loop.blocks):
        b = blocks[n]
        if lo <= b.start < hi and (dom is None or n in dom[loop.latch]):
            out.extend(insns[b.start:b.end])
    return [x for x in out if x.op != "NOP"]


def counts(body: list[Insn]) -> dict[str, int]:
    c = {"insns": len(body)}
    for x in body:
        k = classify(x)
        if k is None:
            continue
        k = re.sub(r"\(.*\)", "", k)
        c[k] = c.get(k, 0) + 1
    for op in ("FMUL", "FFMA", "FADD"):
        c[op] = sum(1 for x in body if x.op.startswith(op))
    return c


def timeline(body: list[Insn]) -> str:
    parts: list[str] = []
    run_kind, run_n, alu = None, 0, 0

    def flush():
        nonlocal run_kind, run_n
        if run_kind:
            parts.append(run_kind + (f"x{run_n}" if run_n > 1 else ""))
        run_kind, run_n = None, 0

    for x in body:
        k = classify(x)
        if k is None:
            alu += 1
            continue
        if k == run_kind:
            run_n += 1
            continue
        flush()
        if alu:
            parts.append(f"[{alu}]")
            alu = 0
        run_kind, run_n = k, 1
    flush()
    if alu:
        parts.append(f"[{alu}]")
    return " ".join(parts)


def waits(body: list[Insn]) -> str:
    """Where the waits sit in a step (instruction indices in the body): the turn's barrier, the products, the
    wgmma waits, and how many exponentials run between the wait for S (WAIT1) and the wait for the own P V
    (WAIT0), i.e. under that P V; R2UR moves (vector to uniform register) in the step."""
    ks = [classify(x) for x in body]

    def first(prefix):
        return next((i for i, k in enumerate(ks) if k and k.startswith(prefix)), None)

    w0, w1 = first("WAIT0"), first("WAIT1")
    under = sum(1 for k in ks[w1:w0] if k == "EX2") if w0 is not None and w1 is not None and w0 > w1 else 0
    r2ur = sum(1 for x in body if x.op.startswith("R2UR"))
    return (f"turn sync at {first('BAR.SYNC')}, first QK at {first('QK')}, first PV at {first('PV')}, turn pass at "
            f"{first('BAR.ARV')}, WAIT1 at {w1}, WAIT0 at {w0}; EX2 {ks.count('EX2')}, of them {under} between WAIT1 "
            f"and WAIT0 (under the own P V; WAIT0 at the step's top: 0); R2UR {r2ur}")


def stalls(body: list[Insn]) -> str:
    """The encoded stall cycles of a body, in all and by opcode (the opcode's first two parts)."""
    by: dict[str, list[int]] = {}
    for x in body:
        key = ".".join(x.op.split(".")[:2]) if x.op.startswith(("MUFU", "F2FP", "HGMMA", "WARPGROUP")) else x.op.split(".")[0]
        n = by.setdefault(key, [0, 0])
        n[0] += 1
        n[1] += x.stall
    total = sum(v[1] for v in by.values())
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:10]
    return f"{total} cycles over {len(body)} instructions; " + ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("sass", help="a file of cuobjdump -sass output")
    ap.add_argument("--function", default="", help="a substring of the mangled kernel name (default: the first)")
    ap.add_argument("--list", action="store_true", help="list the file's functions and their sizes, then stop")
    ap.add_argument("--timeline", action="store_true", help="print each HGMMA loop's timeline")
    ap.add_argument("--stalls", action="store_true", help="print each loop's encoded stall cycles (module doc)")
    ap.add_argument("--min-hgmma", type=int, default=1, help="only loops with at least this many HGMMA (default 1)")
    a = ap.parse_args(argv)
    funcs = read_functions(a.sass)
    if not funcs:
        print(f"{a.sass}: no function with SASS in it (is it cuobjdump -sass output?)", file=sys.stderr)
        return 1
    if a.list:
        for name, ins in funcs.items():
            print(f"{len([x for x in ins if x.op != 'NOP']):6d} {name}")
        return 0
    names = [n for n in funcs if a.function in n]
    if not names:
        print(f"no function contains {a.function!r}; the file holds: " + ", ".join(funcs), file=sys.stderr)
        return 1
    name = names[0]
    insns = funcs[name]
    blocks = build_cfg(insns)
    dom = dominators(blocks)
    loops = natural_loops(blocks, dom)
    total = counts([x for x in insns if x.op != "NOP"])
    print(f"function {name[:120]}{'...' if len(name) > 120 else ''}")
    print("whole kernel: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    for lp in sorted(loops, key=lambda l: blocks[l.header].start):
        body = loop_insns(insns, blocks, lp)
        c = counts(body)
        if c.get("QK", 0) + c.get("PV", 0) < a.min_hgmma:
            continue
        lo, hi = insns[blocks[lp.header].start].addr, insns[blocks[lp.latch].end - 1].addr
        print(f"loop 0x{lo:x}-0x{hi:x}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
        always = loop_insns(insns, blocks, lp, dom)
        ca = counts(always)
        print(f"  every iteration (blocks dominating the back edge): " + ", ".join(f"{k} {v}" for k, v in ca.items()))
        print("  waits: " + waits(always))
        if a.stalls:
            print("  stalls, every iteration (cycles/instructions by opcode): " + stalls(always))
        if a.timeline:
            print("  all:   " + timeline(body))
            print("  every: " + timeline(always))
    return 0


if __name__ == "__main__":
    sys.exit(main())
