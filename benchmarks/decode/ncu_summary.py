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


SCALE_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
SCALE_TO_MB = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="the raw page of an ncu report as CSV")
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        table = list(csv.DictReader(f))
    units = next((r for r in table if not r.get("ID")), {})  # the row under the header: each metric's unit
    rows = [r for r in table if r.get("ID", "").isdigit()]

    def value(r, metric, scales):
        if metric not in r:
            return "-"
        return f"{number(r[metric]) * scales.get(units.get(metric, ''), math.nan):.2f}"

    def plain(r, metric):
        return f"{number(r[metric]):.1f}" if metric in r else "-"

    print("| kernel | us | DRAM MB read | DRAM % peak | grid | block | SM active / elapsed cycles |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.get('Kernel Name', '?')[:60]} | {value(r, 'gpu__time_duration.sum', SCALE_TO_US)} | "
              f"{value(r, 'dram__bytes_read.sum', SCALE_TO_MB)} | "
              f"{plain(r, 'dram__throughput.avg.pct_of_peak_sustained_elapsed')} | "
              f"{r.get('launch__grid_size')} | {r.get('launch__block_size')} | "
              f"{plain(r, 'sm__cycles_active.avg')} / {plain(r, 'sm__cycles_elapsed.avg')} |")


if __name__ == "__main__":
    main()
