"""Print the ours-vs-FlashAttention-2 table of bench JSON files (flashbuild bench --json ...).

    python3 benchmarks/vs_fa2/summary.py benchmarks/vs_fa2/h200-sm90-fp16.bench.json ...
    python3 benchmarks/vs_fa2/summary.py --cudnn benchmarks/vs_fa2/h200-sm90-fp16.bench.json

One row per (direction, dtype, hdim, causal) and seqlen: flashbuild TFLOPS, SDPA flash TFLOPS
and the ratio; with --cudnn, also SDPA's cuDNN backend from the same file and ours / cuDNN.
Later files override earlier ones for the same row.
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)

import json
import sys

args = sys.argv[1:]
cudnn = "--cudnn" in args
paths = [a for a in args if a != "--cudnn"]
rows = {}
for path in paths:
    for r in json.load(open(path))["results"]:
        if r.get("window_left", -1) != -1 or r.get("softcap", 0.0):
            continue
        key = (r["direction"], r["dtype"], r["hdim"], r["causal"], r["seqlen"])
        rows.setdefault(key, {})[r["backend"]] = r["tflops"]
header = ["direction", "dtype", "hdim", "causal", "seqlen", "flashbuild", "sdpa-flash (FA2)", "ratio"]
if cudnn:
    header += ["sdpa-cudnn", "ours / cuDNN"]
print("| " + " | ".join(header) + " |")
print("|" + " --- |" * len(header))
for key in sorted(rows, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3], k[4])):
    ours, fa2 = rows[key].get("flashbuild"), rows[key].get("sdpa-flash")
    if ours is None or fa2 is None:
        continue
    d, dt, h, c, s = key
    line = f"| {d} | {dt} | {h} | {'yes' if c else 'no'} | {s} | {ours:.1f} | {fa2:.1f} | {ours / fa2:.2f} |"
    if cudnn:
        dnn = rows[key].get("sdpa-cudnn")
        line += f" {dnn:.1f} | {ours / dnn:.2f} |" if dnn else " n/a | n/a |"
    print(line)
