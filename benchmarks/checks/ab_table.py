"""The table of benchmarks/checks/ab_trees.sh: per variant and seqlen, each tree's × cuDNN in every round
(cuDNN timed in the same `flashbuild bench` run), and the ratio of its median to the first tree's.

    python3 benchmarks/checks/ab_table.py OUT RUNS NAME...     # reads /tmp/ab-NAME-R.json, writes OUT/bench-runs.json
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import json
import statistics
import sys

out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {n: [json.load(open(f"/tmp/ab-{n}-{r}.json")) for r in range(1, runs + 1)] for n in names}
json.dump(data, open(f"{out}/bench-runs.json", "w"))


def cells(run):
    """(variant, seqlen) -> (ours / cuDNN, our TFLOPS) of one bench run."""
    tf = {(x["variant"], x["seqlen"], x["backend"]): x["tflops"] for x in run["results"]}
    return {(v, s): (t / tf[(v, s, "sdpa-cudnn")], t) for (v, s, b), t in tf.items() if b == "flashbuild"}


table = {n: [cells(run) for run in data[n]] for n in names}
head = f"{'variant':<30} {'seqlen':>6}" + "".join(f" {n + ' x cuDNN':>22}" for n in names)
head += "".join(f" {n + '/' + names[0]:>16}" for n in names[1:]) + f" {names[-1] + ' TFLOPS':>14}"
print(head)
for key in table[names[0]][0]:
    med = {n: statistics.median(c[key][0] for c in table[n]) for n in names}
    row = f"{key[0]:<30} {key[1]:>6}"
    row += "".join(f" {' '.join(f'{c[key][0]:.3f}' for c in table[n]):>22}" for n in names)
    row += "".join(f" {med[n] / med[names[0]]:>16.3f}" for n in names[1:])
    row += f" {statistics.median(c[key][1] for c in table[names[-1]]):>14.1f}"
    print(row)
