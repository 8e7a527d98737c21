"""The feature study's table: each variant's median ms per tree over the rounds, and base / new (the speed-up).

    python3 benchmarks/hopper_bwd_features/table.py benchmarks/hopper_bwd_features/results/h200-1
"""
import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(r"\s+(\S+) seqlen (\d+) flashbuild:\s+([\d.]+) \(([\d.]+) ms\)")


def main(folder: Path) -> None:
    rows = {}
    for f in sorted(folder.glob("*-*-*.txt")):
        tree, cfg, _ = f.stem.split("-")
        for line in f.read_text().splitlines():
            if m := LINE.match(line):
                if cfg == "window" and "local" not in m.group(1):
                    continue  # the plain variants take no window: measured once per round, under softcap's
                key = (cfg, m.group(1), int(m.group(2)))
                rows.setdefault(key, {}).setdefault(tree, []).append((float(m.group(3)), float(m.group(4))))
    print(f"| call | variant | seqlen | base TFLOPS (ms) | new TFLOPS (ms) | base / new |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (cfg, variant, seqlen), d in sorted(rows.items()):
        if "base" not in d or "new" not in d:
            continue
        b_ms, n_ms = (statistics.median(x[1] for x in d[t]) for t in ("base", "new"))
        b_tf, n_tf = (statistics.median(x[0] for x in d[t]) for t in ("base", "new"))
        call = {"softcap": "softcap 30", "window": "window (512, 0)"}[cfg] if "local" in variant else "plain"
        print(f"| {call} | {variant} | {seqlen} | {b_tf:.1f} ({b_ms:.3f}) | {n_tf:.1f} ({n_ms:.3f}) | {b_ms / n_ms:.2f}x |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
