"""ours / FA3 and ours / cuDNN per forward variant and seqlen of one `flashbuild bench --peer-source` run (the
bench.json ../fa3_slice/peer.sh writes), with both TFLOPS; the rows issue 46's acceptance names are marked.
A bench's log (its `VARIANT seqlen S BACKEND:  TFLOPS (ms)` lines, the .txt peer.sh keeps) gives the same table.

    python3 benchmarks/fwd_tile_turnover/peer_rows.py bench.json|bench.txt
"""
import sys

if sys.argv[1:] in (["-h"], ["--help"]) or len(sys.argv) != 2:  # usage without a GPU (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import json  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402

source = pathlib.Path(sys.argv[1])
if source.suffix == ".txt":
    tf = {(m[1], int(m[2]), m[3]): float(m[4]) for m in
          re.finditer(r"^\s+(\S+) seqlen (\d+) (\S+):\s+([0-9.]+) \(", source.read_text(), flags=re.M)}
else:
    tf = {(x["variant"], x["seqlen"], x["backend"]): x["tflops"] for x in json.loads(source.read_text())["results"]}
print(f"{'variant':<28} {'seqlen':>6} {'ours/FA3':>9} {'ours/cuDNN':>10} {'ours TF':>8} {'FA3 TF':>8}")
for (variant, seqlen, backend), ours in sorted(tf.items()):
    if backend != "flashbuild":
        continue
    fa3, cudnn = tf.get((variant, seqlen, "flash-attn-3")), tf.get((variant, seqlen, "sdpa-cudnn"))
    row = f"{variant:<28} {seqlen:>6} {ours / fa3 if fa3 else float('nan'):>9.3f}"
    row += f" {ours / cudnn if cudnn else float('nan'):>10.3f} {ours:>8.1f} {fa3 or float('nan'):>8.1f}"
    print(row + ("  <1.00 vs FA3" if fa3 and ours < fa3 and seqlen >= 4096 else ""))
