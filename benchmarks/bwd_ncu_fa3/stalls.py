"""Stall samples by reason from ncu's source page (run.sh SOURCE=..., CSV of SASS lines): each kernel's totals by
reason, then, for the reasons given, the SASS lines holding the most samples (a sample is charged to the instruction a
warp waits to issue: a stall after a barrier or a TRYWAIT shows on the instruction after it).

    python3 benchmarks/bwd_ncu_fa3/stalls.py results/h200-3/source-ours-64.csv.gz results/h200-3/source-fa3-64.csv.gz
    python3 benchmarks/bwd_ncu_fa3/stalls.py --by-opcode results/h200-4/source-ours-128-on.csv.gz ...

--by-opcode sums each kernel's samples by opcode (the SASS mnemonic before its first dot, predicates left out) instead,
with the reasons given beside the total, the opcodes holding the most samples first.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io

REASONS = ["long_sb", "barrier", "wait", "mio", "short_sb", "selected", "not_selected", "dispatch", "math",
           "branch_resolving", "no_inst"]


def rows(path: str) -> list[dict]:
    text = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read()
    return list(csv.DictReader(io.StringIO(text[text.index('"Address"'):])))


def number(row: dict, key: str) -> float:
    return float((row.get(key) or "0").replace(",", "") or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="source-page CSVs (.csv or .csv.gz)")
    parser.add_argument("--top", type=int, default=8, help="lines shown per reason")
    parser.add_argument("--reasons", default="long_sb,barrier,wait,mio", help="reasons to list lines for")
    parser.add_argument("--by-opcode", action="store_true", help="samples summed by opcode, not listed by line")
    args = parser.parse_args()
    if args.by_opcode:
        for path in args.sources:
            by_opcode(path, rows(path), args.reasons.split(","), args.top)
        return
    for path in args.sources:
        table = rows(path)
        totals = {r: int(sum(number(row, f"stall_{r}") for row in table)) for r in REASONS}
        every = int(sum(number(row, "Warp Stall Sampling (All Samples)") for row in table))
        print(f"{path}: {every:,} samples; " + ", ".join(f"{r} {v:,}" for r, v in totals.items()))
        for reason in args.reasons.split(","):
            print(f"  {reason}:")
            for row in sorted(table, key=lambda row: -number(row, f"stall_{reason}"))[:args.top]:
                print(f"    {int(number(row, f'stall_{reason}')):7,}  {row['Address'][-5:]}  "
                      f"{int(number(row, 'Instructions Executed')):9,}x  {row['Source'].strip()[:80]}")


def opcode(source: str) -> str:
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def by_opcode(path: str, table: list[dict], reasons: list[str], top: int) -> None:
    sums: dict[str, dict[str, float]] = {}
    for row in table:
        entry = sums.setdefault(opcode(row["Source"]), {})
        entry["all"] = entry.get("all", 0) + number(row, "Warp Stall Sampling (All Samples)")
        for r in reasons:
            entry[r] = entry.get(r, 0) + number(row, f"stall_{r}")
    every = int(sum(e["all"] for e in sums.values()))
    print(f"{path}: {every:,} samples, by opcode (all, then {', '.join(reasons)})")
    for name, e in sorted(sums.items(), key=lambda kv: -kv[1]["all"])[:top]:
        print(f"    {name:10} {int(e['all']):8,}  " + "  ".join(f"{r} {int(e[r]):,}" for r in reasons))


if __name__ == "__main__":
    main()
