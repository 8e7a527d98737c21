"""Print the ours-vs-FlashAttention-2 table of bench JSON files (flashbuild bench --json ...).

    python3 benchmarks/summary.py benchmarks/h200-sm90-fp16-hdim64+128-fwd.bench.json ...

One row per (direction, dtype, hdim, causal) and seqlen: flashbuild TFLOPS, SDPA flash TFLOPS
and the ratio. Later files override earlier ones for the same row.
"""

import json
import sys

rows = {}
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        if r.get("window_left", -1) != -1 or r.get("softcap", 0.0):
            continue
        key = (r["direction"], r["dtype"], r["hdim"], r["causal"], r["seqlen"])
        rows.setdefault(key, {})[r["backend"]] = r["tflops"]
print("| direction | dtype | hdim | causal | seqlen | flashbuild | sdpa-flash (FA2) | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for key in sorted(rows, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3], k[4])):
    ours, fa2 = rows[key].get("flashbuild"), rows[key].get("sdpa-flash")
    if ours is None or fa2 is None:
        continue
    d, dt, h, c, s = key
    print(f"| {d} | {dt} | {h} | {'yes' if c else 'no'} | {s} | {ours:.1f} | {fa2:.1f} | {ours / fa2:.2f} |")
