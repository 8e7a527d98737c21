"""Stall samples by reason from ncu's source page (run.sh SOURCE=..., CSV of SASS lines): each kernel's totals by
reason, then, for the reasons given, the SASS lines holding the most samples (a sample is charged to the instruction a
warp waits to issue: a stall after a barrier or a TRYWAIT shows on the instruction after it).

    python3 benchmarks/bwd_ncu_fa3/stalls.py results/h200-3/source-ours-64.csv.gz results/h200-3/source-fa3-64.csv.gz
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
