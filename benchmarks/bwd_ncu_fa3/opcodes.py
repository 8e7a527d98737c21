"""Executed instructions by opcode from ncu's source page (run.sh SOURCE=..., CSV of SASS lines), two kernels side by
side: which opcodes account for the difference in executed (warp-level) instructions, and the stall samples on each.

    python3 benchmarks/bwd_ncu_fa3/opcodes.py results/h200-2/source-ours-128.csv.gz results/h200-2/source-fa3-128.csv.gz
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re


def load(path: str) -> tuple[collections.Counter, collections.Counter]:
    """(executed, stall samples) by opcode (the mnemonic without its modifiers)."""
    text = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read()
    lines = text[text.index('"Address"'):]
    executed, samples = collections.Counter(), collections.Counter()
    for row in csv.DictReader(io.StringIO(lines)):
        source = row.get("Source", "").strip()
        match = re.match(r"(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", source)
        if not match:
            continue
        op = match.group(2)
        number = lambda key: float((row.get(key) or "0").replace(",", "") or 0)  # noqa: E731
        executed[op] += number("Instructions Executed")
        samples[op] += number("Warp Stall Sampling (All Samples)")
    return executed, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    (ea, sa), (eb, sb) = load(args.a), load(args.b)
    ta, tb = sum(ea.values()), sum(eb.values())
    print(f"executed: a {ta:,.0f}, b {tb:,.0f} (a / b {ta / tb:.3f}); stall samples: a {sum(sa.values()):,.0f}, "
          f"b {sum(sb.values()):,.0f}")
    print(f"{'opcode':<12}{'a executed':>14}{'b executed':>14}{'a - b':>14}{'a samples':>12}{'b samples':>12}")
    ops = sorted(set(ea) | set(eb), key=lambda op: -abs(ea[op] - eb[op]))
    for op in ops[:args.top]:
        print(f"{op:<12}{ea[op]:>14,.0f}{eb[op]:>14,.0f}{ea[op] - eb[op]:>14,.0f}{sa[op]:>12,.0f}{sb[op]:>12,.0f}")


if __name__ == "__main__":
    main()
