"""One line per kernel of an Nsight Compute raw CSV (ncu --import REPORT --page raw --csv --metrics ...): the
kernel, its time (us), the DRAM bytes it read (MB) and DRAM throughput (% of peak), grid and block, and SM active
over elapsed cycles (how much of the kernel's time an SM, on average, had work).

Usage:
    python3 benchmarks/decode/ncu_summary.py ncu-metrics.csv
"""

from __future__ import annotations

import argparse
import csv
import math


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="the raw page of an ncu report as CSV")
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("ID", "").isdigit()]
    print("| kernel | us | DRAM MB read | DRAM % peak | grid | block | SM active / elapsed cycles |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.get('Kernel Name', '?')[:60]} | {number(r.get('gpu__time_duration.sum')) / 1e3:.2f} | "
              f"{number(r.get('dram__bytes_read.sum')) / 1e6:.1f} | "
              f"{number(r.get('dram__throughput.avg.pct_of_peak_sustained_elapsed')):.1f} | "
              f"{r.get('launch__grid_size')} | {r.get('launch__block_size')} | "
              f"{number(r.get('sm__cycles_active.avg')):.0f} / {number(r.get('sm__cycles_elapsed.avg')):.0f} |")


if __name__ == "__main__":
    main()
