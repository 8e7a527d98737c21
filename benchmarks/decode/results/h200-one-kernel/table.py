"""The split-KV A/B's table: per (head dim, batch, cache), each tree's per-round times of the auto-split call, and
new / old of the medians. Usage: python3 decode_table.py RESULTS_DIR"""
import glob
import json
import statistics
import sys

rows = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/decode-*.json")):
    _, tree, h, r = f.rsplit("/", 1)[1][:-5].split("-")
    for row in json.load(open(f)):
        gb = 2 * row["batch"] * row["cache"] * 8 * int(h[1:]) * 2 / 1e9
        rows.setdefault((int(h[1:]), row["batch"], row["cache"]), {}).setdefault(tree, []).append(
            (int(r), row["us"], gb / row["gbps_one_split"] * 1e6))
print("| hdim | batch | cache | old us (auto) | new us (auto) | new / old | old us (1 split) | new us (1 split) | new / old |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for key in sorted(rows):
    d = rows[key]
    med = lambda t, i: statistics.median(x[i] for x in d[t])
    print(f"| {key[0]} | {key[1]} | {key[2]} | {med('old', 1):.1f} | {med('new', 1):.1f} | {med('new', 1) / med('old', 1):.3f} | "
          f"{med('old', 2):.1f} | {med('new', 2):.1f} | {med('new', 2) / med('old', 2):.3f} |")
