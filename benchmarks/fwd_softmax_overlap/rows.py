"""The table of benchmarks/fwd_softmax_overlap/ab.sh: per variant and seqlen, each tree's x cuDNN in every
round it ran (cuDNN timed in the same `flashbuild bench` run), and the ratio of its median to the first tree's.

    python3 benchmarks/fwd_softmax_overlap/rows.py OUT NAME...    # reads OUT/bench-NAME-R.json
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]) or len(sys.argv) < 3:  # usage without a GPU (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import json
import pathlib
import statistics

out, names = pathlib.Path(sys.argv[1]), sys.argv[2:]


def cells(path):
    """(variant, seqlen) -> (ours / cuDNN, our TFLOPS) of one bench run."""
    tf = {(x["variant"], x["seqlen"], x["backend"]): x["tflops"] for x in json.loads(path.read_text())["results"]}
    return {(v, s): (t / tf[(v, s, "sdpa-cudnn")], t) for (v, s, b), t in tf.items() if b == "flashbuild"}


runs = {n: [cells(p) for p in sorted(out.glob(f"bench-{n}-*.json"))] for n in names}
names = [n for n in names if runs[n]]
if not names:
    sys.exit("no bench runs under " + str(out))
print(f"{'variant':<28} {'seqlen':>6}" + "".join(f" {n + ' x cuDNN':>22}" for n in names)
      + "".join(f" {n + '/' + names[0]:>12}" for n in names[1:]) + "".join(f" {n + ' TF':>9}" for n in names))
for key in runs[names[0]][0]:
    have = [n for n in names if key in runs[n][0]]
    med = {n: statistics.median(c[key][0] for c in runs[n]) for n in have}
    row = f"{key[0]:<28} {key[1]:>6}"
    row += "".join(f" {' '.join(f'{c[key][0]:.3f}' for c in runs[n]) if n in have else '-':>22}" for n in names)
    row += "".join(f" {med[n] / med[names[0]] if n in have else float('nan'):>12.3f}" for n in names[1:])
    row += "".join(f" {statistics.median(c[key][1] for c in runs[n]) if n in have else float('nan'):>9.1f}" for n in names)
    print(row)
